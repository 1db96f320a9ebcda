package diagnose

import (
	"encoding/json"
	"testing"
)

func u(v uint64) *uint64 { return &v }

func TestParseOOM(t *testing.T) {
	const gib, mib = 1 << 30, 1 << 20
	tests := []struct {
		name string
		in   string
		want OOM
	}{
		{
			name: "2.x",
			in:   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 6.69 MiB is free. Process 1234 has 79.14 GiB memory in use. Of the allocated memory 78.40 GiB is allocated by PyTorch, and 229.86 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
			want: OOM{Backend: "cuda", TriedBytes: u(20 * mib), GPU: ip(0), TotalBytes: ub(79.15, gib), FreeBytes: ub(6.69, mib),
				AllocatedBytes: ub(78.40, gib), ReservedUnallocatedBytes: ub(229.86, mib), Fragmented: true,
				Processes: []OOMProcess{{PID: 1234, Bytes: *ub(79.14, gib)}}},
		},
		{
			name: "2.1-era capacty misspelling, two processes",
			in:   "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 1 has a total capacty of 14.75 GiB of which 1.07 GiB is free. Process 28375 has 13.67 GiB memory in use. Process 99 has 10.00 MiB memory in use. Of the allocated memory 12.98 GiB is allocated by PyTorch, and 570.28 MiB is reserved by PyTorch but unallocated.",
			want: OOM{Backend: "cuda", TriedBytes: ub(1.5, gib), GPU: ip(1), TotalBytes: ub(14.75, gib), FreeBytes: ub(1.07, gib),
				AllocatedBytes: ub(12.98, gib), ReservedUnallocatedBytes: ub(570.28, mib),
				Processes: []OOMProcess{{PID: 28375, Bytes: *ub(13.67, gib)}, {PID: 99, Bytes: 10 * mib}}},
		},
		{
			name: "1.x",
			in:   "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.90 GiB total capacity; 14.96 GiB already allocated; 9.75 MiB free; 15.08 GiB reserved in total by PyTorch)",
			want: OOM{Backend: "cuda", TriedBytes: u(20 * mib), GPU: ip(0), TotalBytes: ub(15.90, gib), FreeBytes: ub(9.75, mib),
				AllocatedBytes: ub(14.96, gib), ReservedBytes: ub(15.08, gib),
				ReservedUnallocatedBytes: u(*ub(15.08, gib) - *ub(14.96, gib)), Fragmented: true},
		},
		{
			// 1.0-1.3 printed amount_cached - amount_allocated as "cached"
			// (pytorch/pytorch#13751): the reserved-but-unallocated part
			name: "1.0 cached",
			in:   "RuntimeError: CUDA out of memory. Tried to allocate 1.12 GiB (GPU 3; 11.17 GiB total capacity; 10.23 GiB already allocated; 6.81 MiB free; 332.28 MiB cached)",
			want: OOM{Backend: "cuda", TriedBytes: ub(1.12, gib), GPU: ip(3), TotalBytes: ub(11.17, gib), FreeBytes: ub(6.81, mib),
				AllocatedBytes: ub(10.23, gib), ReservedUnallocatedBytes: ub(332.28, mib), ReservedBytes: u(*ub(10.23, gib) + *ub(332.28, mib))},
		},
		{
			// MPSAllocator's format_size divides by 1024: its GB is GiB
			name: "MPS, binary GB and MB",
			in:   "RuntimeError: MPS backend out of memory (MPS allocated: 7.23 GB, other allocations: 1.54 GB, max allowed: 9.07 GB). Tried to allocate 896.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).",
			want: OOM{Backend: "mps", TriedBytes: u(896 * mib), AllocatedBytes: ub(7.23, gib), OtherBytes: ub(1.54, gib), AllowedBytes: ub(9.07, gib)},
		},
		{
			name: "HIP 2.x with a memory fraction and private pools",
			in:   "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 255.98 GiB of which 244.65 GiB is free. 1.05 GiB allowed; Of the allocated memory 1017.01 MiB is allocated by PyTorch, with 17.00 MiB allocated in private pools (e.g., HIP Graphs), and 54.99 MiB is reserved by PyTorch but unallocated.",
			want: OOM{Backend: "hip", TriedBytes: u(2 * mib), GPU: ip(0), TotalBytes: ub(255.98, gib), FreeBytes: ub(244.65, gib), AllowedBytes: ub(1.05, gib),
				AllocatedBytes: ub(1017.01, mib), PrivatePoolBytes: u(17 * mib), ReservedUnallocatedBytes: ub(54.99, mib), Fragmented: true},
		},
		{
			name: "2.x without the device index, this process",
			in:   "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 274.00 MiB. GPU  has a total capacity of 4.93 GiB of which 137.69 MiB is free. Including non-PyTorch memory, this process has 4.30 GiB memory in use. Of the allocated memory 4.14 GiB is allocated by PyTorch, and 35.88 MiB is reserved by PyTorch but unallocated.",
			want: OOM{Backend: "cuda", TriedBytes: u(274 * mib), TotalBytes: ub(4.93, gib), FreeBytes: ub(137.69, mib), ProcessBytes: ub(4.30, gib),
				AllocatedBytes: ub(4.14, gib), ReservedUnallocatedBytes: ub(35.88, mib)},
		},
		{
			name: "truncated",
			in:   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a tot",
			want: OOM{Backend: "cuda", TriedBytes: u(512 * mib), GPU: ip(0)},
		},
		{
			name: "cuBLAS",
			in:   "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
			want: OOM{Backend: "cuda", Library: "cuBLAS"},
		},
		{
			name: "cuDNN",
			in:   "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
			want: OOM{Backend: "cuda", Library: "cuDNN"},
		},
		{
			name: "bytes unit",
			in:   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512 bytes. GPU 0 has a total capacity of 2.00 GiB of which 0 bytes is free.",
			want: OOM{Backend: "cuda", TriedBytes: u(512), GPU: ip(0), TotalBytes: u(2 * gib), FreeBytes: u(0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseOOM("some earlier line\n" + tt.in)
			if !ok {
				t.Fatal("not recognised")
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tt.want)
			if string(g) != string(w) {
				t.Errorf("got  %s\nwant %s", g, w)
			}
		})
	}
	if _, ok := ParseOOM("RuntimeError: shapes cannot be multiplied"); ok {
		t.Error("a non-OOM error was parsed as OOM")
	}
}

func ip(v int) *int { return &v }

func ub(f, unit float64) *uint64 { v := uint64(f*unit + 0.5); return &v }
