package diagnose

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	tb := func(lines ...string) []string {
		return append([]string{"Traceback (most recent call last):", `  File "train.py", line 3, in <module>`}, lines...)
	}
	tests := []struct {
		name   string
		in     Input
		reason string
		exc    string
	}{
		{"success", Input{ExitCode: 0}, Success, ""},
		{"plain failure", Input{ExitCode: 2, Tail: []string{"usage: train.py"}}, ExitError, ""},
		{"exception", Input{ExitCode: 1, Tail: tb("KeyError: 'lr'")}, PythonException, "KeyError"},
		{"chained exception keeps the last", Input{ExitCode: 1, Tail: append(tb("ValueError: a", "", "During handling of the above exception, another exception occurred:", ""), tb("mymod.Boom: b")...)}, PythonException, "mymod.Boom"},
		{"cuda oom beats the OOM kill that followed", Input{ExitCode: 1, OOMKills: 1, Tail: tb("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB")}, CUDAOOM, ""},
		{"host oom from the cgroup counter", Input{Signal: syscall.SIGKILL, ExitCode: -1, OOMKills: 1}, HostOOMKilled, ""},
		{"host oom killed a worker", Input{ExitCode: 1, OOMKills: 1, Tail: tb("RuntimeError: DataLoader worker (pid 12) is killed by signal: Killed.")}, HostOOMKilled, ""},
		{"host oom from the kernel log", Input{Signal: syscall.SIGKILL, ExitCode: -1, KernelOOM: []string{"kernel: Out of memory: Killed process 99 (python)"}}, HostOOMKilled, ""},
		{"sigkill without evidence", Input{Signal: syscall.SIGKILL, ExitCode: -1, PeakRSS: 9 << 30, Limit: 10 << 30, LimitSource: "cgroup"}, Killed, ""},
		{"sigbus", Input{Signal: syscall.SIGBUS, ExitCode: -1}, ShmExhausted, ""},
		{"segv", Input{Signal: syscall.SIGSEGV, ExitCode: -1}, Segfault, ""},
		{"faulthandler segv with exit 139", Input{ExitCode: 139, Tail: []string{"Fatal Python error: Segmentation fault"}}, Segfault, ""},
		{"shm before dataloader", Input{ExitCode: 1, Tail: tb("RuntimeError: DataLoader worker (pid 4711) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory.")}, ShmExhausted, ""},
		{"worker died", Input{ExitCode: 1, Tail: tb("RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly")}, DataloaderDied, ""},
		{"nccl timeout", Input{ExitCode: 1, Tail: []string{"[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE)"}}, NCCLError, ""},
		{"device assert", Input{ExitCode: 1, Tail: tb("RuntimeError: CUDA error: device-side assert triggered")}, CUDAError, ""},
		{"fork", Input{ExitCode: 1, Tail: tb("RuntimeError: Cannot re-initialize CUDA in forked subprocess.")}, CUDAForkError, ""},
		{"driver too old", Input{ExitCode: 1, Tail: tb("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).")}, CUDAEnvError, ""},
		{"corrupt checkpoint", Input{ExitCode: 1, Tail: tb("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory")}, CorruptCheckpoint, ""},
		{"disk full", Input{ExitCode: 1, Tail: tb("OSError: [Errno 28] No space left on device")}, DiskFull, ""},
		{"shm full is not disk full", Input{ExitCode: 1, Tail: tb("OSError: [Errno 28] No space left on device: '/dev/shm/torch_123'")}, ShmExhausted, ""},
		{"interrupted wins", Input{Interrupted: true, Signal: syscall.SIGINT, ExitCode: -1, Tail: tb("KeyboardInterrupt")}, Interrupted, ""},
		{"kernel restart ended by the client's SIGTERM", Input{KernelShutdown: true, KernelRestart: true, Interrupted: true, Signal: syscall.SIGTERM, ExitCode: -1}, Restarted, ""},
		{"kernel restart, the kernel exits", Input{KernelShutdown: true, KernelRestart: true}, Restarted, ""},
		{"kernel restart ended by the client's SIGKILL", Input{KernelShutdown: true, KernelRestart: true, Interrupted: true, Signal: syscall.SIGKILL, ExitCode: -1}, Restarted, ""},
		{"kernel shutdown ended by the client's SIGTERM", Input{KernelShutdown: true, Interrupted: true, ExitCode: 143}, Success, ""},
		{"kernel shutdown, the kernel exits", Input{KernelShutdown: true}, Success, ""},
		{"kernel restart, an abort as Python shuts down", Input{KernelShutdown: true, KernelRestart: true, Signal: syscall.SIGABRT, ExitCode: -1}, Restarted, ""},
		{"kernel shutdown, an abort as Python shuts down", Input{KernelShutdown: true, ExitCode: 134}, Success, ""},
		{"an abort without a shutdown request", Input{Signal: syscall.SIGABRT, ExitCode: -1}, ExitError, ""},
		{"kernel restart, a segfault on the way out", Input{KernelShutdown: true, KernelRestart: true, Signal: syscall.SIGSEGV, ExitCode: -1}, Segfault, ""},
		{"kernel restart, OOM-killed first", Input{KernelShutdown: true, KernelRestart: true, Signal: syscall.SIGKILL, ExitCode: -1, OOMKills: 1}, HostOOMKilled, ""},
		{"kernel shutdown, a failure on the way out", Input{KernelShutdown: true, ExitCode: 1, Tail: tb("KeyError: 'x'")}, PythonException, "KeyError"},
		{"stalled", Input{Stalled: true, Signal: syscall.SIGKILL, ExitCode: -1, Stacks: []string{"Thread 1:\n  File x"}}, Stalled, ""},
		{"start failure", Input{StartErr: errors.New("exec: not found"), ExitCode: 127}, StartFailed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Classify(tt.in)
			if v.Reason != tt.reason {
				t.Fatalf("reason %s, want %s (evidence %q)", v.Reason, tt.reason, v.Evidence)
			}
			if v.ExceptionType != tt.exc && tt.exc != "" {
				t.Errorf("exception type %q, want %q", v.ExceptionType, tt.exc)
			}
			if v.Reason != Success && (len(v.Evidence) == 0 || len(v.Advice) == 0) {
				t.Errorf("evidence %q advice %q", v.Evidence, v.Advice)
			}
			if tt.in.Signal != 0 && (v.Signal == nil || v.ExitCode != 128+int(tt.in.Signal)) {
				t.Errorf("signal %v exit %d", v.Signal, v.ExitCode)
			}
		})
	}
}

func TestKilledSaysHowCloseToTheLimit(t *testing.T) {
	// A cgroup limit holds the cgroup's charge: that is what is compared,
	// whatever the job's own peak.
	v := Classify(Input{Signal: syscall.SIGKILL, ExitCode: -1, PeakRSS: 7 << 30, PeakWhat: "PSS summed over its processes",
		Limit: 10 << 30, LimitSource: "cgroup", LimitPeak: 9 << 30})
	ev := strings.Join(v.Evidence, "\n")
	if !strings.Contains(ev, "peak host memory of the job: 7 GiB (PSS summed over its processes); its cgroup's charge (page cache included) peaked at 9 GiB, 90% of its 10 GiB limit (cgroup)") {
		t.Errorf("evidence %q", v.Evidence)
	}
	v = Classify(Input{Signal: syscall.SIGKILL, ExitCode: -1, PeakRSS: 9 << 30, Limit: 10 << 30, LimitSource: "cgroup"})
	if ev := strings.Join(v.Evidence, "\n"); !strings.Contains(ev, "peak host memory of the job: 9 GiB, at least 90% of its 10 GiB limit (cgroup): the cgroup's charge, which the limit holds, was not read") {
		t.Errorf("evidence %q", v.Evidence)
	}
	v = Classify(Input{Signal: syscall.SIGKILL, ExitCode: -1, PeakRSS: 8 << 30, Limit: 16 << 30, LimitSource: "host"})
	if ev := strings.Join(v.Evidence, "\n"); !strings.Contains(ev, "peak host memory of the job: 8 GiB, 50% of the host's 16 GiB of RAM") {
		t.Errorf("evidence %q", v.Evidence)
	}
}
