package diagnose

import (
	"strings"
	"testing"
)

// mp.spawn's reports, as torch 1.13's parent printed them for a 4-process
// gloo job whose process 2 raised (or died of SIGSEGV).
const spawnRaised = `rank 0 trained
Traceback (most recent call last):
  File "/tmp/dist/spawn_job.py", line 21, in <module>
    mp.spawn(worker, args=(4, int(sys.argv[1]), sys.argv[2]), nprocs=4)
  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 160, in join
    raise ProcessRaisedException(msg, error_index, failed_process.pid)
torch.multiprocessing.spawn.ProcessRaisedException: 

-- Process 2 terminated with the following error:
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 69, in _wrap
    fn(i, *args)
  File "/tmp/dist/spawn_job.py", line 14, in worker
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.20 GiB already allocated; 1.50 GiB free; 13.50 GiB reserved in total by PyTorch)")
RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.20 GiB already allocated; 1.50 GiB free; 13.50 GiB reserved in total by PyTorch)


after the report`

const spawnExited = `Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 140, in join
    raise ProcessExitedException(
torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGSEGV`

func TestSpawnReportTakesTheProcess(t *testing.T) {
	lines := ReadLines(strings.Split(spawnRaised, "\n"))
	for _, l := range lines {
		inBlock := strings.HasPrefix(l.Text, "RuntimeError") || strings.Contains(l.Text, "fn(i, *args)")
		switch {
		case inBlock && (l.Rank != 2 || l.Source != "mp.spawn process 2"):
			t.Errorf("%q: rank %d source %q, want 2 from mp.spawn's report", l.Text, l.Rank, l.Source)
		case (l.Text == "after the report" || l.Text == "rank 0 trained" || strings.HasPrefix(l.Text, "torch.multiprocessing")) && l.Rank != -1:
			t.Errorf("%q outside the report took rank %d", l.Text, l.Rank)
		}
	}
	v := Classify(Input{ExitCode: 1, Tail: strings.Split(spawnRaised, "\n")})
	if v.Reason != CUDAOOM {
		t.Fatalf("reason %s, want cuda_oom", v.Reason)
	}
	if ev := strings.Join(v.Evidence, "\n"); !strings.Contains(ev, "process 2 (mp.spawn's report") {
		t.Errorf("the evidence does not name process 2:\n%s", ev)
	}
}

func TestSpawnExited(t *testing.T) {
	lines := ReadLines(strings.Split(spawnExited, "\n"))
	last := lines[len(lines)-1]
	if last.Rank != 2 {
		t.Errorf("ProcessExitedException line: rank %d, want 2", last.Rank)
	}
	e, ok := ParseSpawnExit(last.Text)
	if !ok || e.Process != 2 || e.Signal != "SIGSEGV" {
		t.Errorf("ParseSpawnExit: %+v %v", e, ok)
	}
	if e, ok := ParseSpawnExit("torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with exit code 7"); !ok || e.Process != 3 || e.Code != 7 || e.Signal != "" {
		t.Errorf("exit code form: %+v %v", e, ok)
	}
	if v := Classify(Input{ExitCode: 1, Tail: strings.Split(spawnExited, "\n")}); v.Reason != Segfault {
		t.Errorf("reason %s, want segfault", v.Reason)
	}
}
