package diagnose

import (
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// OOM holds the numbers of a GPU out-of-memory message. A nil field means
// the message did not carry it (older formats, truncated lines, cuBLAS).
type OOM struct {
	// Backend is the accelerator: "cuda" (NVIDIA), "hip" (AMD ROCm),
	// "mps" (Apple Metal) or "xpu" (Intel). ROCm builds of PyTorch print
	// the CUDA allocator's message with "HIP" in it.
	Backend    string  `json:"backend"`
	TriedBytes *uint64 `json:"tried_bytes"`
	GPU        *int    `json:"gpu"`
	TotalBytes *uint64 `json:"total_bytes"`
	FreeBytes  *uint64 `json:"free_bytes"`
	// AllocatedBytes is what PyTorch's allocator held in tensors; for MPS
	// the "MPS allocated" figure.
	AllocatedBytes           *uint64 `json:"allocated_bytes"`
	ReservedUnallocatedBytes *uint64 `json:"reserved_unallocated_bytes"`
	// ReservedBytes is reserved in total: given by the 1.4–1.13 form
	// ("reserved in total by PyTorch"); for the 1.0–1.3 form, whose
	// "cached" figure is the reserved-but-unallocated part, it is
	// allocated + cached.
	ReservedBytes *uint64 `json:"reserved_bytes,omitempty"`
	// ProcessBytes is 2.x's "this process has X memory in use"
	// (PyTorch's and everything else the process holds on the GPU).
	ProcessBytes *uint64 `json:"process_bytes,omitempty"`
	// AllowedBytes is the cap set by set_per_process_memory_fraction
	// ("X allowed;"), or MPS's high-watermark limit ("max allowed").
	AllowedBytes *uint64 `json:"allowed_bytes,omitempty"`
	// PrivatePoolBytes is the part of the allocated memory held in
	// private pools (CUDA or HIP graphs).
	PrivatePoolBytes *uint64 `json:"private_pool_bytes,omitempty"`
	// OtherBytes is MPS's "other allocations": Metal memory the process
	// holds outside PyTorch's allocator.
	OtherBytes *uint64 `json:"other_bytes,omitempty"`
	// Processes lists "Process N has X memory in use" of the 2.x form.
	Processes []OOMProcess `json:"processes,omitempty"`
	// Library names cuBLAS or cuDNN when the failure came from there.
	Library string `json:"library,omitempty"`
	// Fragmented is true when the cache held at least the request in
	// reserved-but-unallocated blocks, so the request failed for want of a
	// contiguous block rather than for want of memory.
	Fragmented bool `json:"fragmented"`
}

// OOMProcess is one process named in a 2.x OOM message.
type OOMProcess struct {
	PID   int    `json:"pid"`
	Bytes uint64 `json:"bytes"`
}

const sizeRE = `([0-9]+(?:\.[0-9]+)?)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)`

var (
	reOOMMarker    = lazyre.New(`MPS backend out of memory|HIP out of memory|hipErrorOutOfMemory|XPU out of memory|CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|CUDA [Ee]rror: out of memory|cudaErrorMemoryAllocation|cuda runtime error \(2\) : out of memory|error=2 : out of memory|Tried to allocate [\d.]+ ?[KMGT]?i?B \(GPU \d+;|larger than 4GB! Tried to allocate|(?:UR_RESULT|ZE_RESULT|PI)_ERROR_OUT_OF_(?:DEVICE_MEMORY|RESOURCES)|Allocation is out of device memory`)
	reTried        = lazyre.New(`Tried to allocate ` + sizeRE)
	reGPU          = lazyre.New(`GPU +([0-9]+)`)
	reCap2x        = lazyre.New(`total capaci?ty of ` + sizeRE + ` of which ` + sizeRE + ` is free`)
	reCapOnly      = lazyre.New(`total capaci?ty of ` + sizeRE)
	reProc2x       = lazyre.New(`Process ([0-9]+) has ` + sizeRE + ` memory in use`)
	reThisProc     = lazyre.New(`this process has ` + sizeRE + ` memory in use`)
	reAlloc2x      = lazyre.New(`Of the allocated memory ` + sizeRE + ` is allocated by PyTorch`)
	rePrivatePools = lazyre.New(`with ` + sizeRE + ` allocated in private pools`)
	reResUnalloc   = lazyre.New(sizeRE + ` is reserved by PyTorch but unallocated`)
	reAllowed      = lazyre.New(sizeRE + ` allowed;`)
	reTotal1x      = lazyre.New(sizeRE + ` total capacity`)
	reAlloc1x      = lazyre.New(sizeRE + ` already allocated`)
	reFree1x       = lazyre.New(sizeRE + ` free`)
	reRes1x        = lazyre.New(sizeRE + ` reserved in total by PyTorch`)
	reCached       = lazyre.New(sizeRE + ` cached[);]`)
	reMPS          = lazyre.New(`MPS allocated: ` + sizeRE + `, other allocations: ` + sizeRE + `(?:, max allowed: ` + sizeRE + `)?`)
)

// ParseOOM reads a GPU out-of-memory message in any form PyTorch has
// printed: CUDA 2.x ("GPU 0 has a total capacity of ... of which ... is
// free", with or without the device index), the 2.1-era misspelling
// "capacty", 1.4–1.13 ("(GPU 0; X total capacity; Y already allocated; Z
// free; W reserved in total by PyTorch)", with "V allowed;" under a memory
// fraction), 1.0–1.3 ("...; Z free; W cached)"), 0.x ("cuda runtime error
// (2) : out of memory"), cudaMallocAsync's "Allocation on device", truncated
// messages, cuBLAS/cuDNN allocation failures; ROCm's "HIP out of memory" in
// the same forms; Apple's "MPS backend out of memory (MPS allocated: X,
// other allocations: Y, max allowed: Z). Tried to allocate W on private
// pool", whose KB, MB and GB are binary units (MPSAllocator's format_size
// divides by 1024). ok is false when text holds no OOM at all.
func ParseOOM(text string) (o OOM, ok bool) {
	loc := reOOMMarker.FindStringIndex(text)
	if loc == nil {
		return OOM{}, false
	}
	// Read from the start of the marker's line on; earlier lines belong to
	// other messages.
	start := strings.LastIndexByte(text[:loc[0]], '\n') + 1
	s := text[start:]
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	marker := text[loc[0]:loc[1]]
	switch {
	case strings.Contains(marker, "MPS"):
		o.Backend = "mps"
	case strings.Contains(marker, "HIP") || strings.Contains(marker, "hip"):
		o.Backend = "hip"
	case strings.Contains(marker, "XPU") || strings.Contains(marker, "4GB") || strings.Contains(marker, "_ERROR_OUT_OF_") || strings.Contains(marker, "out of device memory"):
		o.Backend = "xpu"
	default:
		o.Backend = "cuda"
		// "torch.OutOfMemoryError: HIP out of memory": the marker found
		// first is the exception's type; the backend is in the message
		switch {
		case strings.Contains(s, "HIP out of memory"):
			o.Backend = "hip"
		case strings.Contains(s, "XPU out of memory"):
			o.Backend = "xpu"
		case strings.Contains(s, "MPS backend out of memory"):
			o.Backend = "mps"
		}
	}
	binary := o.Backend == "mps"
	sz := func(num, unit string) *uint64 { return size(num, unit, binary) }
	switch {
	case strings.Contains(s, "CUBLAS_STATUS_ALLOC_FAILED"):
		o.Library = "cuBLAS"
	case strings.Contains(s, "CUDNN_STATUS_ALLOC_FAILED"):
		o.Library = "cuDNN"
	}
	if m := reTried.FindStringSubmatch(s); m != nil {
		o.TriedBytes = sz(m[1], m[2])
	}
	if o.Backend == "mps" {
		if m := reMPS.FindStringSubmatch(s); m != nil {
			o.AllocatedBytes = sz(m[1], m[2])
			o.OtherBytes = sz(m[3], m[4])
			if m[5] != "" {
				o.AllowedBytes = sz(m[5], m[6])
			}
		}
		return o, true
	}
	if m := reGPU.FindStringSubmatch(s); m != nil {
		if g, err := strconv.Atoi(m[1]); err == nil {
			o.GPU = &g
		}
	}
	if m := reCap2x.FindStringSubmatch(s); m != nil {
		o.TotalBytes = sz(m[1], m[2])
		o.FreeBytes = sz(m[3], m[4])
	} else if m := reCapOnly.FindStringSubmatch(s); m != nil {
		// XPU's 2.x form: "GPU 0 has a total capacity of X." and no free figure
		o.TotalBytes = sz(m[1], m[2])
	} else {
		if m := reTotal1x.FindStringSubmatch(s); m != nil {
			o.TotalBytes = sz(m[1], m[2])
		}
		if m := reFree1x.FindStringSubmatch(s); m != nil {
			o.FreeBytes = sz(m[1], m[2])
		}
	}
	if m := reThisProc.FindStringSubmatch(s); m != nil {
		o.ProcessBytes = sz(m[1], m[2])
	}
	if m := reAllowed.FindStringSubmatch(s); m != nil {
		o.AllowedBytes = sz(m[1], m[2])
	}
	if m := reAlloc2x.FindStringSubmatch(s); m != nil {
		o.AllocatedBytes = sz(m[1], m[2])
	} else if m := reAlloc1x.FindStringSubmatch(s); m != nil {
		o.AllocatedBytes = sz(m[1], m[2])
	}
	if m := rePrivatePools.FindStringSubmatch(s); m != nil {
		o.PrivatePoolBytes = sz(m[1], m[2])
	}
	switch {
	case reResUnalloc.MatchString(s):
		m := reResUnalloc.FindStringSubmatch(s)
		o.ReservedUnallocatedBytes = sz(m[1], m[2])
	case reRes1x.MatchString(s):
		m := reRes1x.FindStringSubmatch(s)
		o.ReservedBytes = sz(m[1], m[2])
		if o.AllocatedBytes != nil && *o.ReservedBytes >= *o.AllocatedBytes {
			v := *o.ReservedBytes - *o.AllocatedBytes
			o.ReservedUnallocatedBytes = &v
		}
	case reCached.MatchString(s):
		// 1.0–1.3: "cached" is what the allocator held beyond the
		// allocated memory (amount_cached - amount_allocated)
		m := reCached.FindStringSubmatch(s)
		o.ReservedUnallocatedBytes = sz(m[1], m[2])
		if o.AllocatedBytes != nil {
			v := *o.AllocatedBytes + *o.ReservedUnallocatedBytes
			o.ReservedBytes = &v
		}
	}
	for _, m := range reProc2x.FindAllStringSubmatch(s, -1) {
		pid, _ := strconv.Atoi(m[1])
		if b := sz(m[2], m[3]); b != nil {
			o.Processes = append(o.Processes, OOMProcess{PID: pid, Bytes: *b})
		}
	}
	if o.TriedBytes != nil && o.ReservedUnallocatedBytes != nil && *o.TriedBytes > 0 &&
		*o.ReservedUnallocatedBytes >= *o.TriedBytes {
		o.Fragmented = true
	}
	return o, true
}

// size converts "1.50" "GiB" to bytes. binary makes KB, MB and GB powers of
// 1024, as Apple's MPS allocator prints them.
func size(num, unit string, binary bool) *uint64 {
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return nil
	}
	mult := map[string]float64{
		"bytes": 1, "B": 1,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	}[unit]
	if binary {
		switch unit {
		case "KB":
			mult = 1 << 10
		case "MB":
			mult = 1 << 20
		case "GB":
			mult = 1 << 30
		case "TB":
			mult = 1 << 40
		}
	}
	v := uint64(f*mult + 0.5)
	return &v
}
