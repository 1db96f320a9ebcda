package diagnose

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/units"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/reenact")

// reenactment is one file of testdata/reenact: output as the tool in
// question prints it (written for this test from the tool's own format
// strings, not copied from a report) and how the process ended.
type reenactment struct {
	exit        int
	signal      syscall.Signal
	tail        []string
	interrupted bool
	stop        *Stop
}

// at is when a re-enacted stop's signal came; deadline-in is counted from it.
var at = time.Date(2026, 12, 3, 10, 11, 12, 0, time.UTC)

func (r *reenactment) stopOf() *Stop {
	if r.stop == nil {
		r.stop = &Stop{At: at}
	}
	return r.stop
}

func loadReenactment(t *testing.T, name string) reenactment {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "reenact", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := reenactment{exit: 1}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	body := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case body:
			r.tail = append(r.tail, l)
		case l == "--8<-- output":
			body = true
		case strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, "exit: "):
			if r.exit, err = strconv.Atoi(l[len("exit: "):]); err != nil {
				t.Fatal(err)
			}
		case l == "interrupted: yes":
			r.interrupted = true
		case strings.HasPrefix(l, "stop: "):
			// stop: SIGNAL SENDER PID [terminal]
			f := strings.Fields(l[len("stop: "):])
			st := r.stopOf()
			st.Signal = map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT, "SIGHUP": syscall.SIGHUP}[f[0]]
			if f[1] != "-" {
				st.Sender = f[1]
			}
			st.SenderPID, _ = strconv.Atoi(f[2])
			st.FromTerminal = len(f) > 3 && f[3] == "terminal"
		case strings.HasPrefix(l, "deadline-in: "):
			d, err := time.ParseDuration(l[len("deadline-in: "):])
			if err != nil {
				t.Fatal(err)
			}
			r.stopOf().Deadline = at.Add(d)
		case strings.HasPrefix(l, "scheduler: "):
			st := r.stopOf()
			st.Scheduler = append(st.Scheduler, l[len("scheduler: "):])
		case strings.HasPrefix(l, "signal: "):
			s, ok := map[string]syscall.Signal{"SIGABRT": syscall.SIGABRT, "SIGKILL": syscall.SIGKILL,
				"SIGSEGV": syscall.SIGSEGV, "SIGBUS": syscall.SIGBUS, "SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT}[l[len("signal: "):]]
			if !ok {
				t.Fatalf("unknown signal in %q", l)
			}
			r.signal = s
		default:
			t.Fatalf("%s: header line %q", name, l)
		}
	}
	if err := sc.Err(); err != nil || len(r.tail) == 0 {
		t.Fatalf("%s: %v, %d lines", name, err, len(r.tail))
	}
	return r
}

func (r reenactment) input() Input {
	in := Input{ExitCode: r.exit, Tail: r.tail, Interrupted: r.interrupted, Stop: r.stop}
	if r.signal != 0 {
		in.ExitCode, in.Signal = -1, r.signal
	}
	return in
}

// TestReenactments classifies messages of the classes users met and
// vramguard once read wrong, each re-enacted in testdata/reenact as the tool
// prints it, and checks the verdict a person reading it would give: the
// reason, the exception, the evidence line that carries it, and every OOM
// figure the message states. The whole verdict is kept in a golden file
// beside each message (go test -run TestReenactments -update rewrites them)
// so that a change to its summary, evidence or advice shows in review.
func TestReenactments(t *testing.T) {
	gib := func(f float64) uint64 { return uint64(f*(1<<30) + 0.5) }
	mib := func(f float64) uint64 { return uint64(f*(1<<20) + 0.5) }
	type oomWant struct {
		backend                                string
		tried, total, free, allocated, resUnal uint64 // 0: absent from the message
		gpu                                    int    // -1: absent
	}
	cases := []struct {
		name      string
		reason    string
		exception string
		evidence  []string
		oom       *oomWant
	}{
		{"xpu-ipex-1x-form", CUDAOOM, "RuntimeError", []string{"XPU out of memory", "Intel XPU"},
			&oomWant{backend: "xpu", tried: gib(1), total: gib(15.56), allocated: gib(13.12), resUnal: gib(13.87) - gib(13.12), gpu: 0}},
		{"xpu-torch-2x-form", CUDAOOM, "torch.OutOfMemoryError", []string{"Intel XPU"},
			&oomWant{backend: "xpu", tried: gib(4), total: gib(13.74), allocated: gib(10.10), resUnal: gib(3.47), gpu: 0}},
		{"xpu-ipex-4gb-limit", CUDAOOM, "RuntimeError", []string{"larger than 4GB", "UR_L0_USE_RELAXED_ALLOCATION_LIMITS"},
			&oomWant{backend: "xpu", tried: gib(5.46), total: gib(15.56), allocated: mib(556.67), resUnal: gib(2.70) - mib(556.67), gpu: 0}},
		{"xpu-level-zero-out-of-resources", CUDAOOM, "RuntimeError", []string{"UR_RESULT_ERROR_OUT_OF_RESOURCES", "Level Zero"},
			&oomWant{backend: "xpu", gpu: -1}},
		{"xpu-ipex-allocation-out-of-device-memory", CUDAOOM, "RuntimeError", []string{"Allocation is out of device memory", "Intel"},
			&oomWant{backend: "xpu", gpu: -1}},
		{"ide-exit-137-sigkill", Killed, "", []string{"Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "SIGKILL"}, nil},
		{"ide-exit-139-sigsegv", Segfault, "", []string{"interrupted by signal 11: SIGSEGV"}, nil},
		{"shm-unable-to-resize-file", ShmExhausted, "RuntimeError", []string{"unable to resize file <filename not specified>", "/dev/shm"}, nil},
		{"shm-unable-to-resize-torch-file", ShmExhausted, "RuntimeError", []string{"unable to resize file </torch_22438_3818345986>"}, nil},
		{"zsh-segmentation-fault", Segfault, "", []string{"zsh: segmentation fault (core dumped)"}, nil},
		{"shell-job-segmentation-fault", Segfault, "", []string{"48213 segmentation fault  python train.py"}, nil},
		{"zsh-job-segmentation-fault-bare", Segfault, "", []string{"48213 segmentation fault (core dumped)"}, nil},
		{"fish-sigsegv", Segfault, "", []string{"terminated by signal SIGSEGV"}, nil},
		{"ide-windows-access-violation", Segfault, "", []string{"0xC0000005"}, nil},
		{"pygame-parachute", Segfault, "", []string{"(pygame parachute) Segmentation Fault", "SIGABRT"}, nil},
		{"cudnn-internal-error", CUDAError, "RuntimeError", []string{"CUDNN_STATUS_INTERNAL_ERROR", "read: "}, nil},
		{"nccl-heartbeat-teardown", NCCLError, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError", []string{"Heartbeat monitor timed out", "rank 1", "Training complete"}, nil},
		{"nccl-watchdog-teardown", NCCLError, "", []string{"Watchdog caught collective operation timeout", "rank 2", "Training completed"}, nil},
		{"compose-service-prefix", PythonException, "json.decoder.JSONDecodeError", []string{"Expecting ',' delimiter"}, nil},
		{"compose-service-prefix-oom", CUDAOOM, "torch.OutOfMemoryError", []string{"trainer-1"},
			&oomWant{backend: "cuda", tried: gib(2), total: gib(23.65), free: gib(1.19), allocated: gib(20.91), resUnal: gib(1.07), gpu: 0}},
		{"compose-exit-zero", PythonException, "KeyError", []string{"trainer-1 exited with code 1", "docker compose exits 0"}, nil},
		{"bash-killed", Killed, "", []string{"90211 Killed", "SIGKILL"}, nil},
		{"dataloader-bus-error-line-wrapped", ShmExhausted, "RuntimeError", []string{"is killed by signal: Bus error. It is possible", "wrapped onto the next line"}, nil},
		{"compose-service-capitals", PythonException, "KeyError", []string{"KeyError: 'model'"}, nil},
		{"dataloader-bus-error-logged", ShmExhausted, "", []string{"is killed by signal: Bus error"}, nil},
		{"dataloader-bus-error-wrapped", ShmExhausted, "RuntimeError", []string{"is killed by signal: Bus error"}, nil},
		// the scheduler's end (Slurm's own lines, a pod's reason,
		// the SIGTERM's sender); a person's interrupt stays interrupted
		{"slurm-time-limit-step", TimeLimit, "", []string{"*** STEP 1234.0 ON n1 CANCELLED AT 2026-12-03T10:11:12 DUE TO TIME LIMIT ***", "--signal=B:USR1@", "--requeue"}, nil},
		{"slurm-time-limit-job", TimeLimit, "", []string{"*** JOB 1234 ON n1 CANCELLED AT 2026-12-03T10:11:12 DUE TO TIME LIMIT ***", "exit status 143"}, nil},
		{"slurm-preemption", Preempted, "", []string{"DUE TO PREEMPTION", "GraceTime"}, nil},
		{"slurm-scancel", Cancelled, "", []string{"*** JOB 88122 ON gpu-a17 CANCELLED AT 2026-12-03T09:15:44 ***", "no DUE TO"}, nil},
		{"slurm-node-failure", NodeFailure, "", []string{"DUE TO NODE FAILURE", "gpu-b02"}, nil},
		{"slurm-sigterm-at-deadline", TimeLimit, "", []string{"SIGTERM from slurmstepd (pid 40112)", "SLURM_JOB_END_TIME"}, nil},
		{"slurm-sigterm-early", Cancelled, "", []string{"SIGTERM from slurmstepd (pid 40112)", "before the job's end time"}, nil},
		{"kube-preemption", Preempted, "", []string{"PreemptionByScheduler", "terminationGracePeriodSeconds"}, nil},
		{"slurm-ctrl-c", Interrupted, "", []string{"SIGINT"}, nil},
		{"kill-by-user", Interrupted, "", []string{"SIGTERM"}, nil},
		{"nccl-error-1x-capital", NCCLError, "RuntimeError", []string{"NCCL Error 2: unhandled system error"}, nil},
		{"nccl-last-error-oom", CUDAOOM, "torch.distributed.DistBackendError", []string{"Cuda failure 'out of memory'", "rank 1", "NCCL_BUFFSIZE"},
			&oomWant{backend: "cuda", gpu: -1}},
		{"nccl-watchdog-own-error", NCCLError, "ncclSystemError", []string{"the first failure in the output, printed by rank 3 (line 1", "ended on an NCCL error of this rank", "No route to host"}, nil},
		{"nccl-rank-prefixed-torchrun", NCCLError, "torch.distributed.DistBackendError", []string{"rank 3", "Software caused connection abort"}, nil},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			v := Classify(loadReenactment(t, c.name).input())
			ev := strings.Join(v.Evidence, "\n")
			if v.Reason != c.reason {
				t.Errorf("reason %s (%s), want %s\nevidence:\n%s", v.Reason, v.Summary, c.reason, ev)
			}
			if v.ExceptionType != c.exception {
				t.Errorf("exception %q, want %q", v.ExceptionType, c.exception)
			}
			for _, want := range c.evidence {
				if !strings.Contains(ev, want) && !strings.Contains(strings.Join(v.Advice, "\n"), want) {
					t.Errorf("neither evidence nor advice holds %q:\n%s", want, ev)
				}
			}
			if len(v.Advice) == 0 {
				t.Error("no advice")
			}
			if c.oom != nil {
				checkOOM(t, v.OOM, c.oom.backend, c.oom.gpu, map[string][2]*uint64{
					"tried":     {ptr(c.oom.tried), v.oomField(func(o *OOM) *uint64 { return o.TriedBytes })},
					"total":     {ptr(c.oom.total), v.oomField(func(o *OOM) *uint64 { return o.TotalBytes })},
					"free":      {ptr(c.oom.free), v.oomField(func(o *OOM) *uint64 { return o.FreeBytes })},
					"allocated": {ptr(c.oom.allocated), v.oomField(func(o *OOM) *uint64 { return o.AllocatedBytes })},
					"reserved_unallocated": {ptr(c.oom.resUnal),
						v.oomField(func(o *OOM) *uint64 { return o.ReservedUnallocatedBytes })},
				})
			} else if v.OOM != nil {
				t.Errorf("an OOM where none was printed: %+v", *v.OOM)
			}
			golden(t, filepath.Join("testdata", "reenact", c.name+".golden.json"), v)
		})
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "reenact", "*.txt"))
	for _, f := range files {
		if n := strings.TrimSuffix(filepath.Base(f), ".txt"); !seen[n] {
			t.Errorf("%s has no case in the table", f)
		}
	}
}

func ptr(v uint64) *uint64 {
	if v == 0 {
		return nil
	}
	return &v
}

func (v Verdict) oomField(f func(*OOM) *uint64) *uint64 {
	if v.OOM == nil {
		return nil
	}
	return f(v.OOM)
}

// checkOOM compares each figure within the rounding of the message's two
// decimals (half a hundredth of its unit: at most 0.005 GiB).
func checkOOM(t *testing.T, o *OOM, backend string, gpu int, figs map[string][2]*uint64) {
	t.Helper()
	if o == nil {
		t.Fatal("no OOM figures")
	}
	if o.Backend != backend {
		t.Errorf("backend %q, want %q", o.Backend, backend)
	}
	switch {
	case gpu < 0 && o.GPU != nil:
		t.Errorf("gpu %d, the message names none", *o.GPU)
	case gpu >= 0 && (o.GPU == nil || *o.GPU != gpu):
		t.Errorf("gpu %v, want %d", o.GPU, gpu)
	}
	for name, wg := range figs {
		want, got := wg[0], wg[1]
		switch {
		case want == nil && got != nil:
			t.Errorf("%s = %s, the message states none", name, units.FormatBytes(*got))
		case want != nil && got == nil:
			t.Errorf("%s missing, want %s", name, units.FormatBytes(*want))
		case want != nil:
			d := int64(*got) - int64(*want)
			if d < 0 {
				d = -d
			}
			if d > 5476083 { // 0.0051 GiB
				t.Errorf("%s = %d, want %d", name, *got, *want)
			}
		}
	}
}

// golden compares v's JSON with the golden file, or writes it under -update.
func golden(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testbin.Golden(t, path, append(b, '\n'), *update)
}
