package diagnose

import (
	"fmt"
	"strings"
	"testing"
)

func TestReadLines(t *testing.T) {
	type want struct {
		text, source string
		rank         int
	}
	tests := []struct {
		name string
		raw  string
		want []want
	}{
		{"plain", "RuntimeError: CUDA error: an illegal memory access was encountered",
			[]want{{"RuntimeError: CUDA error: an illegal memory access was encountered", "", -1}}},
		{"journald", "Mar 21 02:07:08 gpu-node-3 python3[48211]: torch.OutOfMemoryError: CUDA out of memory.",
			[]want{{"torch.OutOfMemoryError: CUDA out of memory.", "gpu-node-3 python3[48211]", -1}}},
		{"journald then rank", "Mar 21 02:07:08 gpu-node-3 torchrun[48200]: [rank5]: Traceback (most recent call last):",
			[]want{{"Traceback (most recent call last):", "rank5", 5}}},
		{"syslog date alone (CI)", "Oct 16 02:07:00   what():  NCCL error in: x",
			[]want{{"  what():  NCCL error in: x", "", -1}}},
		{"PyTorch rank tag keeps the indentation", "[rank5]:   File \"train.py\", line 3, in <module>",
			[]want{{"  File \"train.py\", line 3, in <module>", "rank5", 5}}},
		{"torchrun --tee", "[default3]:ep 55 train, step 1347", []want{{"ep 55 train, step 1347", "default3", 3}}},
		{"host and local rank", "[gpu187:1]:torch.cuda.OutOfMemoryError: x", []want{{"torch.cuda.OutOfMemoryError: x", "gpu187:1", 1}}},
		{"launcher with a pipe", "[trainer22|6]:RuntimeError: x", []want{{"RuntimeError: x", "trainer22|6", 6}}},
		{"srun --label", "  3: RuntimeError: x", []want{{"RuntimeError: x", "task 3", 3}}},
		{"docker compose", "cosyvoice    | RuntimeError: x", []want{{"RuntimeError: x", "cosyvoice", -1}}},
		{"pdsh / deepspeed", "worker-1: Traceback (most recent call last):", []want{{"Traceback (most recent call last):", "worker-1", -1}}},
		{"a lowercase exception is not a host", "socket.timeout: timed out", []want{{"socket.timeout: timed out", "", -1}}},
		{"ray then rank", "(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:563] x",
			[]want{{"[E ProcessGroupNCCL.cpp:563] x", "rank1", 1}}},
		{"ANSI colours", "\x1b[36m(Worker pid=12)\x1b[0m hello", []want{{"hello", "Worker pid=12", -1}}},
		{"a colour code that lost its escape", "[36m(Worker pid=12) hello", []want{{"hello", "Worker pid=12", -1}}},
		{"python logging", "2024-09-11 11:23:11,827 - root - ERROR - Got an OOM", []want{{"root - ERROR - Got an OOM", "", -1}}},
		{"python logging, default format", "ERROR:root:Traceback (most recent call last):", []want{{"Traceback (most recent call last):", "", -1}}},
		{"GitHub Actions", "2025-11-12T11:25:13.4961658Z FAILED x", []want{{"FAILED x", "", -1}}},
		{"a log viewer's line numbers", "[80747] [rank4]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] x",
			[]want{{"[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] x", "rank4", 4}}},
		{"two ranks glued mid-line", "[rank1]: Traceback (most recent call last):[rank0]: Traceback (most recent call last):",
			[]want{{"Traceback (most recent call last):", "rank1", 1}, {"Traceback (most recent call last):", "rank0", 0}}},
		{"a watchdog glued to a progress bar", "global_step=3.2e+4][E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught",
			[]want{{"global_step=3.2e+4]", "", -1}, {"[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught", "", -1}}},
		{"two glog lines glued", "misaligned addressF0327 14:22:53.846107  4827 math_functions.hpp:179] Check failed",
			[]want{{"misaligned address", "", -1}, {"F0327 14:22:53.846107  4827 math_functions.hpp:179] Check failed", "", -1}}},
		{"a c10 header is one header", "[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog",
			[]want{{"[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog", "rank0", 0}}},
		{"a traceback after a log header", "root - ERROR - Traceback (most recent call last):",
			[]want{{"root - ERROR - ", "", -1}, {"Traceback (most recent call last):", "", -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ReadLines([]string{tt.raw})
			var g []want
			for _, l := range got {
				if l.Index != 0 {
					t.Errorf("index %d", l.Index)
				}
				g = append(g, want{l.Text, l.Source, l.Rank})
			}
			if fmt.Sprint(g) != fmt.Sprint(tt.want) {
				t.Errorf("got  %+v\nwant %+v", g, tt.want)
			}
		})
	}
}

// torchrun's failure report names the rank of each entry: its lines are that
// rank's.
func TestReadLinesTorchrunReport(t *testing.T) {
	tail := strings.Split(`torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2023-09-04_10:10:23
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 3669031)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 3669030)
  traceback : Traceback (most recent call last):
    RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error
============================================================
after`, "\n")
	lines := ReadLines(tail)
	rank := map[string]int{}
	for _, l := range lines {
		rank[strings.TrimSpace(l.Text)] = l.Rank
	}
	for text, want := range map[string]int{
		"exitcode  : -9 (pid: 3669031)": 3,
		"RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error": 1,
		"train.py FAILED": -1,
		"after":           -1,
	} {
		if rank[text] != want {
			t.Errorf("%q: rank %d, want %d", text, rank[text], want)
		}
	}
	r := Read(tail)
	f, ok := r.Decisive()
	if !ok || f.Reason != NCCLError || f.Rank != 1 || f.Role != Cause {
		t.Errorf("decisive %+v", f)
	}
	// the report's exitcode -9 is a hint for rank 3, not the verdict
	if by := r.FirstByRank(); by[3].Reason != Killed || by[3].Role != Hint || by[1].Reason != NCCLError {
		t.Errorf("by rank %+v", by)
	}
}

// TestDecisiveAcrossRanks: the ranks that timed out waiting for a dead peer
// print first; the rank that died prints its OOM later. The OOM decides, the
// timeouts and the launcher's SIGTERMs are named as its consequences, and a
// caller can tell which rank failed first from which ranks followed.
func TestDecisiveAcrossRanks(t *testing.T) {
	tail := []string{
		"[rank0]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.",
		"[rank2]:[E626 06:24:44.173078629 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
		"[rank3]: Traceback (most recent call last):",
		"[rank3]:   File \"train.py\", line 88, in train",
		"[rank3]:     loss = model(batch)",
		"[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 3 has a total capacity of 79.20 GiB of which 1.02 GiB is free. Of the allocated memory 74.78 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but unallocated.",
		"W0826 12:47:25.330000 1475957 site-packages/torch/distributed/elastic/multiprocessing/api.py:900] Sending process 1475988 closing signal SIGTERM",
	}
	r := Read(tail)
	f, ok := r.Decisive()
	if !ok || f.Reason != CUDAOOM || f.Rank != 3 || f.Index != 5 || f.Backend != "cuda" {
		t.Fatalf("decisive %+v", f)
	}
	cons := r.Consequences()
	if len(cons) != 3 || cons[0].Kind != KindCollectiveTimeout || cons[0].Rank != 0 || cons[2].Kind != KindLauncherStop {
		t.Errorf("consequences %+v", cons)
	}
	by := r.FirstByRank()
	if len(by) != 3 || by[3].Role != Cause || by[0].Role != Consequence || by[2].Role != Consequence {
		t.Errorf("by rank %+v", by)
	}

	v := Classify(Input{ExitCode: 1, Tail: tail})
	ev := strings.Join(v.Evidence, "\n")
	if v.Reason != CUDAOOM || v.OOM == nil || v.OOM.GPU == nil || *v.OOM.GPU != 3 ||
		!strings.Contains(ev, "printed by rank 3 (line 6 of the output tail)") ||
		!strings.Contains(ev, "3 other lines are consequences, not causes: collective timeouts (NCCL watchdog or gloo) (ranks 0, 2); the launcher stopping the other workers") {
		t.Errorf("%s %+v\n%s", v.Reason, v.OOM, ev)
	}
	if v.ExceptionType != "torch.OutOfMemoryError" {
		t.Errorf("exception %q", v.ExceptionType)
	}
}

// The same message reads the same through journald: a CUDA OOM logged by a
// systemd service, an NCCL timeout that came first on another host.
func TestClassifyThroughJournald(t *testing.T) {
	tail := []string{
		"Mar 21 02:07:01 node-a python3[48211]: Traceback (most recent call last):",
		"Mar 21 02:07:01 node-a python3[48211]:   File \"/srv/train.py\", line 88, in <module>",
		"Mar 21 02:07:01 node-a python3[48211]: RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.90 GiB total capacity; 14.96 GiB already allocated; 9.75 MiB free; 15.08 GiB reserved in total by PyTorch)",
		"Mar 21 02:07:02 node-a systemd[1]: train.service: Main process exited, code=exited, status=1/FAILURE",
	}
	v := Classify(Input{ExitCode: 1, Tail: tail})
	if v.Reason != CUDAOOM || v.ExceptionType != "RuntimeError" || v.OOM.TotalBytes == nil ||
		!strings.Contains(strings.Join(v.Evidence, "\n"), "printed by node-a python3[48211]") {
		t.Errorf("%s %q %+v", v.Reason, v.ExceptionType, v.Evidence)
	}
}

// A source line in a traceback names an error without reporting one.
func TestSourceLinesAreNotFailures(t *testing.T) {
	tail := []string{
		"Traceback (most recent call last):",
		"  File \"train.py\", line 9, in step",
		"    except torch.cuda.OutOfMemoryError:",
		"  File \"dataloader.py\", line 1024, in _try_get_data",
		"    raise RuntimeError('DataLoader worker (pid(s) {}) exited unexpectedly'.format(pids_str)) from e",
		"KeyError: 'lr'",
	}
	if v := Classify(Input{ExitCode: 1, Tail: tail}); v.Reason != PythonException || v.ExceptionType != "KeyError" {
		t.Errorf("%s %q %q", v.Reason, v.ExceptionType, v.Evidence)
	}
}

// FuzzRead: no line, however mangled, makes the reader fail; every piece it
// returns comes from the line (nothing is invented) and names its index.
func FuzzRead(f *testing.F) {
	for _, s := range []string{"", "[", "[rank", "[rank1]:", "[rank1]:[rank2]:x", "F0327 14:22:53.846107", "x F0327 14:22:53.846107 y",
		"[E x.cpp:1]", "a[E x.cpp:1]", "Oct 16 02:07:00 ", "  3: ", "(W pid=1) ", "\x1b[", "2024-01-01T00:00:00.1 - x2024-01-01T00:00:00.1 - y",
		"EOFError: Ran out of input", "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := Read([]string{s, s})
		for _, l := range r.Lines {
			if l.Index < 0 || l.Index > 1 || !strings.Contains(s, strings.TrimSpace(l.Text)) && !strings.Contains(s, "\x1b") {
				t.Fatalf("%q read as %+v", s, l)
			}
		}
		Classify(Input{ExitCode: 1, Tail: []string{s}})
	})
}
