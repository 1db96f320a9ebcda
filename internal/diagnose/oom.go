package diagnose

import (
	"regexp"
	"strconv"
	"strings"
)

// OOM holds the numbers of a CUDA out-of-memory message. A nil field means
// the message did not carry it (older formats, truncated lines, cuBLAS).
type OOM struct {
	TriedBytes               *uint64 `json:"tried_bytes"`
	GPU                      *int    `json:"gpu"`
	TotalBytes               *uint64 `json:"total_bytes"`
	FreeBytes                *uint64 `json:"free_bytes"`
	AllocatedBytes           *uint64 `json:"allocated_bytes"`
	ReservedUnallocatedBytes *uint64 `json:"reserved_unallocated_bytes"`
	// ReservedBytes is reserved-in-total, given by the 1.x form only.
	ReservedBytes *uint64 `json:"reserved_bytes,omitempty"`
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
	reOOMMarker  = regexp.MustCompile(`CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|CUDA error: out of memory|cudaErrorMemoryAllocation`)
	reTried      = regexp.MustCompile(`Tried to allocate ` + sizeRE)
	reGPU        = regexp.MustCompile(`GPU ([0-9]+)`)
	reCap2x      = regexp.MustCompile(`total capaci?ty of ` + sizeRE + ` of which ` + sizeRE + ` is free`)
	reProc2x     = regexp.MustCompile(`Process ([0-9]+) has ` + sizeRE + ` memory in use`)
	reAlloc2x    = regexp.MustCompile(`Of the allocated memory ` + sizeRE + ` is allocated by PyTorch`)
	reResUnalloc = regexp.MustCompile(sizeRE + ` is reserved by PyTorch but unallocated`)
	reTotal1x    = regexp.MustCompile(sizeRE + ` total capacity`)
	reAlloc1x    = regexp.MustCompile(sizeRE + ` already allocated`)
	reFree1x     = regexp.MustCompile(sizeRE + ` free`)
	reRes1x      = regexp.MustCompile(sizeRE + ` (?:reserved in total by PyTorch|cached)`)
)

// ParseOOM reads a CUDA out-of-memory message in any form PyTorch has
// printed: 2.x ("GPU 0 has a total capacity of ... of which ... is free"),
// the 2.1-era misspelling "capacty", 1.x ("(GPU 0; X total capacity; Y
// already allocated; Z free; W reserved in total by PyTorch)"), the 1.0
// "cached" form, truncated messages, and cuBLAS/cuDNN allocation failures.
// ok is false when text holds no OOM at all.
func ParseOOM(text string) (o OOM, ok bool) {
	loc := reOOMMarker.FindStringIndex(text)
	if loc == nil {
		return OOM{}, false
	}
	// Read from the marker on; earlier lines belong to other messages.
	s := text[loc[0]:]
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	switch {
	case strings.Contains(s, "CUBLAS_STATUS_ALLOC_FAILED"):
		o.Library = "cuBLAS"
	case strings.Contains(s, "CUDNN_STATUS_ALLOC_FAILED"):
		o.Library = "cuDNN"
	}
	if m := reTried.FindStringSubmatch(s); m != nil {
		o.TriedBytes = size(m[1], m[2])
	}
	if m := reGPU.FindStringSubmatch(s); m != nil {
		if g, err := strconv.Atoi(m[1]); err == nil {
			o.GPU = &g
		}
	}
	if m := reCap2x.FindStringSubmatch(s); m != nil {
		o.TotalBytes = size(m[1], m[2])
		o.FreeBytes = size(m[3], m[4])
	} else {
		if m := reTotal1x.FindStringSubmatch(s); m != nil {
			o.TotalBytes = size(m[1], m[2])
		}
		if m := reFree1x.FindStringSubmatch(s); m != nil {
			o.FreeBytes = size(m[1], m[2])
		}
	}
	if m := reAlloc2x.FindStringSubmatch(s); m != nil {
		o.AllocatedBytes = size(m[1], m[2])
	} else if m := reAlloc1x.FindStringSubmatch(s); m != nil {
		o.AllocatedBytes = size(m[1], m[2])
	}
	if m := reResUnalloc.FindStringSubmatch(s); m != nil {
		o.ReservedUnallocatedBytes = size(m[1], m[2])
	} else if m := reRes1x.FindStringSubmatch(s); m != nil {
		o.ReservedBytes = size(m[1], m[2])
		if o.AllocatedBytes != nil && *o.ReservedBytes >= *o.AllocatedBytes {
			v := *o.ReservedBytes - *o.AllocatedBytes
			o.ReservedUnallocatedBytes = &v
		}
	}
	for _, m := range reProc2x.FindAllStringSubmatch(s, -1) {
		pid, _ := strconv.Atoi(m[1])
		if b := size(m[2], m[3]); b != nil {
			o.Processes = append(o.Processes, OOMProcess{PID: pid, Bytes: *b})
		}
	}
	if o.TriedBytes != nil && o.ReservedUnallocatedBytes != nil && *o.TriedBytes > 0 &&
		*o.ReservedUnallocatedBytes >= *o.TriedBytes {
		o.Fragmented = true
	}
	return o, true
}

func size(num, unit string) *uint64 {
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return nil
	}
	mult := map[string]float64{
		"bytes": 1, "B": 1,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	}[unit]
	v := uint64(f*mult + 0.5)
	return &v
}
