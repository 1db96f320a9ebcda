package ranks

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
)

var t0 = time.Date(2026, 12, 1, 11, 33, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// rank is a process of a 4-rank job, started by a plain launcher (its rank
// in its environment), a child of the launcher (PID 100).
func rank(r int, end int, exit *Exit) Process {
	w := 4
	p := Process{PID: 1000 + r, PPID: 100, Identity: Identity{Rank: r, LocalRank: ip(r), WorldSize: &w, Source: SourceTorchrun},
		Node: "node-a", Exit: exit, ExitFrom: "pidfd", PeakHost: 200 << 20}
	if end >= 0 {
		p.Ended = at(end)
	}
	steps := int64(3)
	p.Steps = &steps
	return p
}

func code(c int) *Exit           { return &Exit{Code: c} }
func sig(s syscall.Signal) *Exit { return &Exit{Code: -1, Signal: s} }
func exc(text string, ms int) *Report {
	return &Report{Text: text, T: at(ms), From: "the probe, which saw it uncaught"}
}

const (
	oomText    = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.20 GiB already allocated; 1.50 GiB free; 13.50 GiB reserved in total by PyTorch)"
	peerClosed = "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:23470"
	recvTimout = "RuntimeError: [./gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 120000ms for recv operation to complete"
)

// judge runs Judge with the job's own verdict read as Classify reads it.
func judge(t *testing.T, j Job) *Result {
	t.Helper()
	if j.Verdict.Reason == "" {
		j.Verdict = diagnose.Classify(j.Input)
	}
	return Judge(j)
}

func byRank(res *Result) map[int]Rank {
	m := map[int]Rank{}
	for _, r := range res.Ranks {
		m[r.Rank] = r
	}
	return m
}

// wantRoot checks the root cause and that every other rank is collateral.
func wantRoot(t *testing.T, res *Result, rnk int, reason string) {
	t.Helper()
	if res == nil {
		t.Fatal("no result")
	}
	if res.RootCause == nil || res.RootCause.Rank != rnk || res.RootCause.Reason != reason {
		t.Fatalf("root cause %+v, want rank %d %s", res.RootCause, rnk, reason)
	}
	for _, r := range res.Ranks {
		if r.Rank == rnk {
			if r.Collateral || r.Reason != reason {
				t.Errorf("root rank %d: reason %s collateral %v", r.Rank, r.Reason, r.Collateral)
			}
			continue
		}
		if !r.Collateral || r.Reason != diagnose.PeerFailed || len(r.Evidence) == 0 {
			t.Errorf("rank %d: reason %s collateral %v evidence %q, want peer_failed with evidence", r.Rank, r.Reason, r.Collateral, r.Evidence)
		}
	}
}

func TestJudgeFirstFailure(t *testing.T) {
	t.Run("an uncaught CUDA OOM the probe saw, peers' connections closed", func(t *testing.T) {
		procs := []Process{rank(0, 2300, code(1)), rank(1, 1800, code(1)), rank(2, 1200, code(1)), rank(3, 2310, code(1))}
		procs[2].Exception = exc(oomText, 1100)
		for _, i := range []int{0, 1, 3} {
			procs[i].Exception = exc(peerClosed, 1400+i)
		}
		tail := []string{"rank 0 trained", "Traceback (most recent call last):", "  File \"x.py\", line 13, in <module>", oomText, peerClosed, peerClosed, peerClosed}
		res := judge(t, Job{Procs: procs, Tail: tail, Input: diagnose.Input{ExitCode: 1, Tail: tail}})
		wantRoot(t, res, 2, diagnose.CUDAOOM)
		if res.Verdict.Reason != diagnose.CUDAOOM || res.Verdict.OOM == nil || !strings.HasPrefix(res.Verdict.Summary, "rank 2:") {
			t.Errorf("job verdict %s %q oom %v", res.Verdict.Reason, res.Verdict.Summary, res.Verdict.OOM)
		}
		if ev := strings.Join(res.Verdict.Evidence, "\n"); !strings.Contains(ev, "rank 2 (pid 1002) failed first") || !strings.Contains(ev, "ranks 0, 1, 3 ended because of it") {
			t.Errorf("job evidence:\n%s", ev)
		}
		r := byRank(res)
		if !strings.Contains(r[0].Evidence[0], "a peer closed its connection (rank 2 failed first, 300ms before): "+peerClosed) {
			t.Errorf("rank 0's evidence: %q", r[0].Evidence)
		}
		if r[2].LastLine != oomText || r[2].ExitCode == nil || *r[2].ExitCode != 1 || r[2].Signal != nil || *r[2].PeakHostBytes != 200<<20 || *r[2].OptimizerSteps != 3 {
			t.Errorf("rank 2: %+v", r[2])
		}
	})

	t.Run("a segfault with no output; the others' collectives fail after it", func(t *testing.T) {
		procs := []Process{rank(0, 2000, code(1)), rank(1, 900, code(1)), rank(2, 800, sig(syscall.SIGSEGV)), rank(3, 950, code(1))}
		for _, i := range []int{0, 1, 3} {
			procs[i].Exception = exc(peerClosed, 850+i)
		}
		res := judge(t, Job{Procs: procs, Input: diagnose.Input{ExitCode: 1}})
		wantRoot(t, res, 2, diagnose.Segfault)
		if r := byRank(res)[2]; r.Signal == nil || *r.Signal != "SIGSEGV" || *r.ExitCode != 139 {
			t.Errorf("rank 2's exit: %+v", r)
		}
		if res.Verdict.ExitCode != 1 {
			t.Errorf("the job's exit status changed: %d", res.Verdict.ExitCode)
		}
	})

	t.Run("an OOM kill no kernel line names: the first process to die of SIGKILL", func(t *testing.T) {
		procs := []Process{rank(0, 1500, sig(syscall.SIGTERM)), rank(1, 1600, sig(syscall.SIGTERM)), rank(2, 1000, sig(syscall.SIGKILL)), rank(3, 1700, sig(syscall.SIGKILL))}
		procs[2].PeakHost = 1600 << 20
		in := diagnose.Input{ExitCode: 1, OOMKills: 1, KernelOOM: []string{"vramguard's last sample: …"}, Limit: 2 << 30, LimitSource: "--memory-limit"}
		res := judge(t, Job{Procs: procs, Input: in, SIGKILLed: []int{1002, 1003}})
		wantRoot(t, res, 2, diagnose.HostOOMKilled)
		ev := strings.Join(byRank(res)[2].Evidence, "\n")
		if !strings.Contains(ev, "first process of the job to die of SIGKILL") || !strings.Contains(ev, "1.6 GiB") {
			t.Errorf("rank 2's evidence:\n%s", ev)
		}
		// rank 3's SIGKILL came later (vramguard ending what was left)
		if r := byRank(res)[3]; !strings.Contains(r.Evidence[0], "ended by SIGKILL 700ms after rank 2 failed") {
			t.Errorf("rank 3: %q", r.Evidence)
		}
	})

	t.Run("two SIGKILLs together, no kernel line: the OOM killer's victim is the larger, seen last", func(t *testing.T) {
		// the kernel killed both; a process's end is seen once its memory is
		// freed, so the one holding 1.3 GiB is seen 2 ms after the small one
		procs := []Process{rank(0, 1500, sig(syscall.SIGTERM)), rank(1, 1002, sig(syscall.SIGKILL)), rank(2, 1000, sig(syscall.SIGKILL))}
		procs[1].PeakHost, procs[2].PeakHost = 1300<<20, 233<<20
		in := diagnose.Input{ExitCode: 1, OOMKills: 1, Limit: 2 << 30, LimitSource: "--memory-limit"}
		res := judge(t, Job{Procs: procs, Input: in, SIGKILLed: []int{1002, 1001}})
		wantRoot(t, res, 1, diagnose.HostOOMKilled)
		if r := byRank(res)[2]; !strings.Contains(strings.Join(r.Evidence, "\n"), "2ms before rank 1 was seen to end, killed with it") {
			t.Errorf("rank 2's evidence: %q", r.Evidence)
		}
	})

	t.Run("the OOM killer's later victims are collateral of the first", func(t *testing.T) {
		procs := []Process{rank(0, 1500, sig(syscall.SIGTERM)), rank(1, 1100, sig(syscall.SIGKILL)), rank(2, 1000, sig(syscall.SIGKILL)), rank(3, 1200, sig(syscall.SIGKILL))}
		procs[2].PeakHost = 1600 << 20
		// its files closed (the probe's connection) before it was seen to end
		procs[2].Closed = at(990)
		in := diagnose.Input{ExitCode: 1, OOMKills: 3}
		res := judge(t, Job{Procs: procs, Input: in, SIGKILLed: []int{1002, 1001, 1003}})
		wantRoot(t, res, 2, diagnose.HostOOMKilled)
		if ev := byRank(res)[3].Evidence[0]; !strings.Contains(ev, "the OOM killer killed it too, after rank 2 (210ms later)") || !strings.Contains(ev, "rank 2 1.6 GiB") {
			t.Errorf("rank 3: %q", ev)
		}
	})

	t.Run("the victim the kernel named", func(t *testing.T) {
		procs := []Process{rank(0, 500, sig(syscall.SIGKILL)), rank(1, 900, code(1)), rank(2, 1000, sig(syscall.SIGKILL))}
		procs[2].OOMKill = "kernel: Memory cgroup out of memory: Killed process 1002 (python3)"
		procs[1].Exception = exc(peerClosed, 890)
		in := diagnose.Input{ExitCode: 1, OOMKills: 1}
		res := judge(t, Job{Procs: procs, Input: in, KernelNamed: true, SIGKILLed: []int{1000, 1002}})
		// rank 0 was SIGKILLed first, by something else: the named victim
		// failed of its own, the first SIGKILL did not
		if res.RootCause == nil || res.RootCause.Rank != 2 || res.RootCause.Reason != diagnose.HostOOMKilled {
			t.Fatalf("root cause %+v", res.RootCause)
		}
	})

	t.Run("mp.spawn's report names a process whose rank was never reported", func(t *testing.T) {
		w := 4
		spawned := func(r, end int, e *Exit, ranked bool) Process {
			p := Process{PID: 2000 + r, PPID: 1999, Node: "n", Ended: at(end), Exit: e, ExitFrom: "pidfd",
				Argv: []string{"/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=8, pipe_handle=12)", "--multiprocessing-fork"}}
			if ranked {
				p.Identity = Identity{Rank: r, WorldSize: &w, Source: SourceTorch}
			}
			return p
		}
		procs := []Process{spawned(1, 1300, sig(syscall.SIGTERM), true), spawned(3, 1400, sig(syscall.SIGTERM), true)}
		unranked := []Process{spawned(0, 1200, sig(syscall.SIGTERM), false), spawned(2, 1000, sig(syscall.SIGSEGV), false),
			{PID: 1998, PPID: 1999, Argv: []string{"/usr/bin/python3", "-c", "from multiprocessing.resource_tracker import main;main(7)"}}}
		tail := []string{"Traceback (most recent call last):", `  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 140, in join`,
			"    raise ProcessExitedException(", "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGSEGV"}
		res := judge(t, Job{Procs: procs, Unranked: unranked, Tail: tail, Input: diagnose.Input{ExitCode: 1, Tail: tail}})
		wantRoot(t, res, 2, diagnose.Segfault)
		r := byRank(res)
		if len(r) != 4 || r[2].PID != 2002 || r[2].IdentityFrom != SourceSpawnOrder || r[0].PID != 2000 {
			t.Errorf("ranks by mp.spawn's order: %+v", res.Ranks)
		}
		if !strings.Contains(r[2].LastLine, "process 2 terminated with signal SIGSEGV") {
			t.Errorf("rank 2's last line %q", r[2].LastLine)
		}
	})

	t.Run("a report names the rank, its process never seen", func(t *testing.T) {
		tail := strings.Split(`-- Process 1 terminated with the following error:
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 69, in _wrap
    fn(i, *args)
`+oomText, "\n")
		res := judge(t, Job{Tail: tail, Input: diagnose.Input{ExitCode: 1, Tail: tail}})
		if res == nil || res.RootCause == nil || res.RootCause.Rank != 1 || res.RootCause.Reason != diagnose.CUDAOOM {
			t.Fatalf("%+v", res)
		}
		if r := byRank(res)[1]; r.PID != 0 || r.IdentityFrom != "mp.spawn's report" || !strings.Contains(res.RootCause.How, "its process was not seen") {
			t.Errorf("%+v / %q", r, res.RootCause.How)
		}
	})

	t.Run("a later failure of its own keeps its reason", func(t *testing.T) {
		procs := []Process{rank(0, 900, code(1)), rank(1, 2000, code(1))}
		procs[0].Exception = exc(oomText, 890)
		procs[1].Exception = exc("ValueError: bad batch", 1990)
		res := judge(t, Job{Procs: procs, Input: diagnose.Input{ExitCode: 1}})
		r := byRank(res)
		if res.RootCause.Rank != 0 || r[1].Collateral || r[1].Reason != diagnose.PythonException {
			t.Errorf("root %+v, rank 1 %+v", res.RootCause, r[1])
		}
	})

	t.Run("a DataLoader worker with its rank's environment is not the rank", func(t *testing.T) {
		procs := []Process{rank(0, 1000, code(0)), rank(1, 1000, code(0))}
		worker := rank(1, 900, sig(syscall.SIGKILL))
		worker.PID, worker.PPID = 5000, 1001
		res := judge(t, Job{Procs: append(procs, worker), Input: diagnose.Input{ExitCode: 0}})
		if len(res.Ranks) != 2 || byRank(res)[1].PID != 1001 || res.RootCause != nil || byRank(res)[1].Reason != diagnose.Success {
			t.Errorf("%+v root %+v", res.Ranks, res.RootCause)
		}
	})

	t.Run("torchrun under srun: the agent's SLURM_PROCID is not a rank", func(t *testing.T) {
		agent := Process{PID: 90, Identity: Identity{Rank: 0, Source: SourceSlurm}}
		res := judge(t, Job{Procs: []Process{agent, rank(0, 10, code(0)), rank(1, 10, code(0))}, Input: diagnose.Input{}})
		if len(res.Ranks) != 2 || byRank(res)[0].PID != 1000 {
			t.Errorf("%+v", res.Ranks)
		}
	})

	t.Run("stopped by the user: no rank failed first", func(t *testing.T) {
		procs := []Process{rank(0, 1000, sig(syscall.SIGINT)), rank(1, 1001, sig(syscall.SIGINT))}
		res := judge(t, Job{Procs: procs, Input: diagnose.Input{Interrupted: true, Signal: syscall.SIGINT, ExitCode: -1}})
		if res.RootCause != nil || res.Verdict.Reason != diagnose.Interrupted || byRank(res)[0].Reason != diagnose.Interrupted || byRank(res)[0].Collateral {
			t.Errorf("root %+v verdict %s ranks %+v", res.RootCause, res.Verdict.Reason, res.Ranks)
		}
	})

	t.Run("its status unread: it still ended first", func(t *testing.T) {
		procs := []Process{rank(0, 2000, code(1)), rank(1, 1000, nil)}
		procs[0].Exception = exc(peerClosed, 1900)
		res := judge(t, Job{Procs: procs, Input: diagnose.Input{ExitCode: 1}})
		wantRoot(t, res, 1, diagnose.ExitError)
		if r := byRank(res)[1]; r.ExitCode != nil || !strings.Contains(strings.Join(r.Evidence, " "), "could not be read") {
			t.Errorf("%+v", r)
		}
	})

	t.Run("no ranks", func(t *testing.T) {
		if res := judge(t, Job{Tail: []string{"hello"}, Input: diagnose.Input{ExitCode: 1}}); res != nil {
			t.Errorf("%+v", res)
		}
	})
}

func TestJudgeOnlyConsequences(t *testing.T) {
	t.Run("every rank read a failure elsewhere: peer_failed", func(t *testing.T) {
		procs := []Process{rank(0, 1000, code(1)), rank(1, 1010, code(1))}
		procs[0].Exception = exc(peerClosed, 990)
		procs[1].Exception = exc(peerClosed, 995)
		res := judge(t, Job{Procs: procs, Input: diagnose.Input{ExitCode: 1}})
		if res.RootCause != nil || res.Verdict.Reason != diagnose.PeerFailed {
			t.Fatalf("root %+v verdict %s", res.RootCause, res.Verdict.Reason)
		}
		for _, r := range res.Ranks {
			if !r.Collateral || r.Reason != diagnose.PeerFailed {
				t.Errorf("rank %d: %s", r.Rank, r.Reason)
			}
		}
	})

	t.Run("their collectives timed out waiting for the rank with fewer steps", func(t *testing.T) {
		procs := []Process{rank(0, 130_000, code(1)), rank(1, 130_100, code(1)), rank(2, 600_000, code(1))}
		for i := range procs {
			s := int64(6)
			procs[i].Steps, procs[i].LastStep = &s, at(9000)
			procs[i].Exception = exc(recvTimout, 129_000+i)
		}
		five := int64(5)
		procs[2].Steps, procs[2].LastStep, procs[2].Exception = &five, at(8000), exc(peerClosed, 599_000)
		res := judge(t, Job{Procs: procs, Input: diagnose.Input{ExitCode: 1}})
		wantRoot(t, res, 2, diagnose.Stalled)
		if res.Verdict.Reason != diagnose.Stalled || !strings.Contains(res.RootCause.How, "timed out waiting for it") {
			t.Errorf("%s: %q", res.Verdict.Reason, res.RootCause.How)
		}
		if ev := strings.Join(res.Verdict.Evidence, "\n"); !strings.Contains(ev, "ranks 0, 1 ended because of it") {
			t.Errorf("evidence does not name the ranks that waited: %q", ev)
		}
	})

	t.Run("counts read a moment before a sudden end name no straggler", func(t *testing.T) {
		procs := []Process{rank(0, 1000, code(1)), rank(1, 1010, code(1))}
		s5, s6 := int64(5), int64(6)
		procs[0].Steps, procs[0].LastStep, procs[0].Exception = &s5, at(200), exc(peerClosed, 990)
		procs[1].Steps, procs[1].LastStep, procs[1].Exception = &s6, at(900), exc(peerClosed, 995)
		if res := judge(t, Job{Procs: procs, Input: diagnose.Input{ExitCode: 1}}); res.RootCause != nil {
			t.Errorf("root %+v", res.RootCause)
		}
	})
}

const waiting = `Thread 0x00007ff0d6b196c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/tmp/vramguard/probe/vramguard/_probe.py", line 516 in _loop

Current thread 0x00007ff0d6f17040 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1541 in all_reduce
  File "/tmp/dist/stall_job.py", line 13 in <module>`

const stopped = `Current thread 0x00007f6cb63e4040 (most recent call first):
  File "/tmp/dist/stall_job.py", line 7 in wait_for_the_next_batch
  File "/tmp/dist/stall_job.py", line 11 in <module>`

func TestJudgeStalled(t *testing.T) {
	procs := []Process{rank(0, 5000, sig(syscall.SIGKILL)), rank(1, 5001, sig(syscall.SIGKILL)), rank(2, 5002, sig(syscall.SIGKILL))}
	for i := range procs {
		s := int64(6)
		procs[i].Steps, procs[i].StackText, procs[i].Stacks = &s, waiting, "/runs/x/stacks-1-100"+string(rune('0'+i))+".txt"
	}
	// the stopped rank made as many steps as the others: its stack tells
	procs[1].StackText = stopped
	in := diagnose.Input{Signal: syscall.SIGKILL, ExitCode: -1, Stalled: true, StallDesc: "no training progress …"}
	res := judge(t, Job{Procs: procs, Input: in})
	wantRoot(t, res, 1, diagnose.Stalled)
	if !strings.Contains(res.RootCause.How, "waits in no collective, while ranks 0, 2 wait in all_reduce") {
		t.Errorf("how: %q", res.RootCause.How)
	}
	r := byRank(res)
	if !strings.Contains(r[1].Evidence[0], "wait_for_the_next_batch") || r[1].StacksPath == "" {
		t.Errorf("rank 1's evidence %q", r[1].Evidence)
	}
	if !strings.Contains(r[0].Evidence[0], "waits in all_reduce (its Python stack) for rank 1") {
		t.Errorf("rank 0's evidence %q", r[0].Evidence)
	}
	if res.Verdict.Reason != diagnose.Stalled || res.Verdict.ExitCode != 137 || !strings.Contains(res.Verdict.Evidence[0], "rank 1 (pid 1001) stopped making progress") {
		t.Errorf("job verdict %s %d %q", res.Verdict.Reason, res.Verdict.ExitCode, res.Verdict.Evidence)
	}

	// without stacks, the fewest steps
	for i := range procs {
		procs[i].StackText = ""
	}
	four := int64(4)
	procs[0].Steps = &four
	res = judge(t, Job{Procs: procs, Input: in})
	wantRoot(t, res, 0, diagnose.Stalled)
	if !strings.Contains(res.RootCause.How, "fewest optimizer steps (4 optimizer steps; ranks 1, 2 made 6)") {
		t.Errorf("how: %q", res.RootCause.How)
	}

	// nothing tells the ranks apart: no root cause, the job still stalled
	procs[0].Steps = procs[1].Steps
	if res = judge(t, Job{Procs: procs, Input: in}); res.RootCause != nil || res.Verdict.Reason != diagnose.Stalled {
		t.Errorf("root %+v verdict %s", res.RootCause, res.Verdict.Reason)
	}
}

func TestWaitsIn(t *testing.T) {
	if got := waitsIn(waiting); got != "all_reduce" {
		t.Errorf("%q", got)
	}
	if got := waitsIn(stopped); got != "" {
		t.Errorf("%q", got)
	}
	if got := innermost(stopped); got != `File "/tmp/dist/stall_job.py", line 7 in wait_for_the_next_batch` {
		t.Errorf("%q", got)
	}
}
