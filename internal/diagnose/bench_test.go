package diagnose

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// benchTailOut, when set, is where BenchmarkClassify writes the tail it
// classifies, so bench/diagnose/run.sh can time grep on the same bytes.
var benchTailOut = flag.String("bench-tail-out", "", "write the 1 MiB benchmark tail to this file")

// benchTail is about n bytes of what a distributed training job prints: four
// ranks' step logs, tqdm bars, logging lines, NCCL info, and at the end one
// rank's CUDA OOM traceback among the other ranks' watchdog timeouts and the
// launcher's SIGTERMs. Most lines are ones no failure pattern matches, as in
// a real log.
func benchTail(n int) []string {
	var lines []string
	size := 0
	add := func(s string) {
		lines = append(lines, s)
		size += len(s) + 1
	}
	end := []string{
		"[rank0]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.",
		"[rank2]:[E626 06:24:44.173078629 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
		"[rank3]: Traceback (most recent call last):",
		"[rank3]:   File \"/srv/train.py\", line 88, in train",
		"[rank3]:     loss = model(batch)",
		"[rank3]:   File \"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1736, in _wrapped_call_impl",
		"[rank3]:     return self._call_impl(*args, **kwargs)",
		"[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 3 has a total capacity of 79.20 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.17 GiB memory in use. Of the allocated memory 74.78 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
		"W0826 12:47:25.330000 1475957 site-packages/torch/distributed/elastic/multiprocessing/api.py:900] Sending process 1475988 closing signal SIGTERM",
		"W0826 12:47:25.331000 1475957 site-packages/torch/distributed/elastic/multiprocessing/api.py:900] Sending process 1475989 closing signal SIGTERM",
	}
	endSize := 0
	for _, l := range end {
		endSize += len(l) + 1
	}
	for step := 0; size+endSize < n; step++ {
		for r := 0; r < 4 && size+endSize < n; r++ {
			switch step % 50 {
			case 7:
				add(fmt.Sprintf("[rank%d]: %d%%|████▌     | %d/12000 [01:%02d<08:12,  3.41it/s, loss=%.3f]", r, step*100/12000, step, step%60, 2.5-float64(step)/10000))
			case 23:
				add(fmt.Sprintf("[rank%d]:[I626 06:1%d:44.%09d ProcessGroupNCCL.cpp:2172] [PG ID 0 PG GUID 0(default_pg) Rank %d] NCCL INFO comm 0x55d5 rank %d nranks 4 cudaDev %d busId 1b000 - Init COMPLETE", r, step%10, step*7919, r, r, r))
			case 41:
				add(fmt.Sprintf("[rank%d]: 2024-06-26 06:1%d:44,%03d - INFO - trainer - saving checkpoint to /ckpt/step_%07d.pt (elapsed 0:%02d:%02d)", r, step%10, step%1000, step, step%60, step%60))
			default:
				add(fmt.Sprintf("[rank%d]: step %7d | loss %.4f | lr %.3e | grad_norm %.3f | tokens/s %6d | mem_alloc %5.2f GiB | mem_reserved %5.2f GiB", r, step, 2.5-float64(step)/10000, 3e-4*(1-float64(step)/1e6), 1.1+float64(step%97)/100, 120000+step%9000, 61.2+float64(step%13)/10, 74.9+float64(step%7)/10))
			}
		}
	}
	for _, l := range end {
		add(l)
	}
	return lines
}

// BenchmarkClassify times the classifier over a 1 MiB tail (far more than
// the 200 lines the supervisor keeps, as a worst case) and over the last 200
// lines of it. docs/PERFORMANCE.md records the figures beside grep's over the
// same file (bench/diagnose/run.sh).
func BenchmarkClassify(b *testing.B) {
	tail := benchTail(1 << 20)
	if *benchTailOut != "" {
		if err := os.WriteFile(*benchTailOut, []byte(strings.Join(tail, "\n")+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	check := func(b *testing.B, v Verdict) {
		if v.Reason != CUDAOOM || v.OOM == nil || v.OOM.GPU == nil || *v.OOM.GPU != 3 {
			b.Fatalf("verdict %s %+v", v.Reason, v.Evidence)
		}
	}
	for _, bc := range []struct {
		name string
		tail []string
	}{{"1MiB", tail}, {"200lines", tail[len(tail)-200:]}} {
		bytes := 0
		for _, l := range bc.tail {
			bytes += len(l) + 1
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			check(b, Classify(Input{ExitCode: 1, Tail: bc.tail}))
			for b.Loop() {
				Classify(Input{ExitCode: 1, Tail: bc.tail})
			}
		})
	}
}
