package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/supervise"
)

// RunOptions are the flags of `vramguard run`.
type RunOptions struct {
	Name           string
	MemoryLimit    string
	Restart        string
	MaxRestarts    int
	Backoff        time.Duration
	BackoffMax     time.Duration
	StableAfter    time.Duration
	ResumeFrom     string
	StallTimeout   time.Duration
	OOMWarning     time.Duration
	StopTimeout    time.Duration
	SampleInterval time.Duration
	Detach         bool
	JSON           bool
	Simulate       string
	GPUBackend     string
	Kernel         bool
	NoProbe        bool
	ProbeHz        float64
	OOMSnapshot    bool
	AtomicSave     bool
	UnsavedWarning time.Duration
	SaveOn         string
	detachedID     string
	// priorAutosave is a notebook kernel's newest autosave from an earlier
	// kernel (run --kernel sets it), for the post-mortem's kernel section
	priorAutosave *postmortem.Autosave
	// sigs delivers the signals the supervisor takes for its job, caught
	// from before the run is recorded (catchSignals).
	sigs chan os.Signal
	// runName is the name the run is recorded under: Name, or Name-2, ...
	// when an earlier run has Name (run_name.go). Name itself stays what
	// was asked for, which --adapt-remember keys on.
	runName string
	Command []string
	adapt   adaptFlags
	groupFl groupFlags  // --group, --node (run_group.go)
	gpu     gpu.Backend // opened by runRun before the run is recorded
	// changed reports whether a flag was given on the command line.
	changed func(name string) bool
}

// NewCmdRun builds `vramguard run`.
func NewCmdRun(f *Factory) *cobra.Command {
	o := &RunOptions{}
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Run a job under supervision: logs, memory, a post-mortem, restarts",
		Long: `Run COMMAND under supervision.

Its output passes through to the terminal and is kept, time-stamped as it arrives, in
$VRAMGUARD_HOME/runs/RUN/attempt-N.log. The memory of its whole process tree
(DataLoader workers included), its cgroup and its GPU memory are sampled. When it
ends, vramguard explains how (see docs/FAILURES.md for every reason) and what to
change. No process of the job outlives it, even if vramguard itself is killed.

With --resume-from DIR, before each attempt the newest valid checkpoint under DIR
is exported as VRAMGUARD_RESUME (verbatim) and replaces {resume} in the
arguments, as a whole argument or part of one (--resume={resume}). A DIR that
does not exist yet means nothing to resume: the attempt starts fresh and the
next one looks again. {resume} carries only a path of letters, digits and
. _ - + = / that does not start with - (a relative one as ./NAME); a
checkpoint named otherwise is refused (exit 2), as is {resume} inside the
script of a shell's -c or the code of python -c: use "$VRAMGUARD_RESUME" in
a script (os.environ["VRAMGUARD_RESUME"] in Python) instead.

A script that calls vramguard.autosave(model=..., opt=..., dir="ckpt/") is
saved at its optimizer steps, and once more at the first step after the
scheduler's warning: --save-on (SIGUSR1 by default), and SIGTERM while the
script has no SIGTERM handler of its own. Its own handler runs after the
save; the post-mortem says at which step the save was made and how long
after the warning (docs/CLUSTER.md).

Exit status: the job's own (a job killed by signal N gives 128+N); 2 for bad
usage; 3 when --memory-limit cannot be applied here.`,
		Example: `  # supervise a training script
  vramguard run -- python train.py --epochs 10

  # cap host memory like docker --memory, restart on crashes, resume from the newest valid checkpoint
  vramguard run --memory-limit 16g --restart on-failure --resume-from ckpts/ -- python train.py --resume {resume}

  # after a CUDA OOM, come back with half the batch and twice the accumulation (docs/ADAPT.md)
  vramguard run --restart on-failure --adapt --batch 64 --resume-from ckpts/ -- \
      python train.py --batch-size {batch} --grad-accum {accum} --resume {resume}

  # keep running after the terminal closes, then follow and stop it
  vramguard run --detach --name bert -- python train.py
  vramguard logs -f bert
  vramguard stop bert`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return Usagef("no command given: vramguard run [flags] -- COMMAND [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Command = args
			o.changed = cmd.Flags().Changed
			return runRun(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVar(&o.Name, "name", "", "label for the run, to use wherever a RUN is asked for (a name an earlier run has gets -2, -3, ...)")
	o.groupFl.add(fl)
	fl.StringVar(&o.MemoryLimit, "memory-limit", "", "cap host memory of the whole job at SIZE (e.g. 16g), like docker --memory")
	fl.StringVar(&o.Restart, "restart", "never", "restart policy: never, on-failure or always")
	fl.IntVar(&o.MaxRestarts, "max-restarts", 3, "restart at most N times")
	fl.DurationVar(&o.Backoff, "backoff", time.Second, "first restart delay; doubles each restart, with jitter")
	fl.DurationVar(&o.BackoffMax, "backoff-max", 5*time.Minute, "longest restart delay")
	fl.DurationVar(&o.StableAfter, "stable-after", 10*time.Second, "a failure sooner than this after start is a startup failure and is not retried (on-failure)")
	fl.StringVar(&o.ResumeFrom, "resume-from", "", "before each attempt, find the newest valid checkpoint under DIR: exported as VRAMGUARD_RESUME and substituted for {resume} in the arguments (never inside an sh -c script: use \"$VRAMGUARD_RESUME\" there)")
	fl.DurationVar(&o.StallTimeout, "stall-timeout", 0, "kill the job (reason stalled) after D without output, CPU use or training progress (in a distributed job that has made progress, CPU use alone does not count: ranks spin waiting in collectives); 0 disables")
	fl.DurationVar(&o.OOMWarning, "oom-warning", 10*time.Minute, "alert when the memory forecast says the job runs out within D (leaks are alerted too)")
	fl.DurationVar(&o.StopTimeout, "stop-timeout", 30*time.Second, "after vramguard stop or restart, kill the job if it has not ended within D (a signal's sender sets its own deadline)")
	fl.DurationVar(&o.SampleInterval, "sample-interval", time.Second, "how often to sample memory (at least 50ms)")
	fl.BoolVar(&o.Detach, "detach", false, "run in the background, surviving the terminal; prints the run id")
	fl.BoolVar(&o.JSON, "json", false, "print the post-mortem (or, with --detach, the run id) as JSON on stdout")
	fl.StringVar(&o.GPUBackend, "gpu-backend", "auto", "where GPU memory is read: auto, nvml, none or sim:SCENARIO")
	addGPUFlags(cmd, &o.Simulate)
	fl.BoolVar(&o.NoProbe, "no-probe", false, "do not inject the in-process probe into Python children")
	fl.Float64Var(&o.ProbeHz, "probe-hz", 1, "probe sample rate inside the job, 1 to 20 per second")
	fl.BoolVar(&o.OOMSnapshot, "oom-snapshot", false, "record CUDA allocation history (bounded) and dump a snapshot at an OOM; explain shows the largest allocation sites")
	fl.BoolVar(&o.AtomicSave, "atomic-save", false, "make torch.save write a temporary file, fsync and rename, so a crash mid-save keeps the previous checkpoint")
	fl.DurationVar(&o.UnsavedWarning, "unsaved-warning", 30*time.Minute, "warn when the job has trained this long since its last checkpoint (0 disables)")
	fl.StringVar(&o.SaveOn, "save-on", "SIGUSR1", "the scheduler's warning signal (SIGUSR1, SIGTERM, SIGINT or SIGHUP) on which vramguard.autosave() in the job saves at the next optimizer step (SIGTERM too while the job has no handler of its own); passed as VRAMGUARD_SAVE_ON")
	fl.BoolVar(&o.Kernel, "kernel", false, "the job is a Jupyter kernel: each restart of the same kernel becomes an attempt of one run (the kernelspec of vramguard jupyter install sets it)")
	addAdaptFlags(fl, &o.adapt)
	fl.StringVar(&o.detachedID, "detached-run-id", "", "")
	fl.MarkHidden("detached-run-id")
	return cmd
}

// minSampleInterval is the shortest --sample-interval: each sample walks
// the job's process tree in /proc and writes the store.
const minSampleInterval = 50 * time.Millisecond

func newRunID(now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

func runRun(ctx context.Context, f *Factory, o *RunOptions) error {
	if v := os.Getenv(detachedIDVar); v != "" && o.detachedID == "" {
		o.detachedID = v
		os.Unsetenv(detachedIDVar) // the supervisor's, not its job's
	}
	switch o.Restart {
	case supervise.RestartNever, supervise.RestartOnFailure, supervise.RestartAlways:
	default:
		return Usagef("invalid --restart %q: use never, on-failure or always", o.Restart)
	}
	if o.ProbeHz <= 0 || o.ProbeHz > 20 {
		return Usagef("--probe-hz must be above 0 and at most 20")
	}
	if o.MaxRestarts < 0 {
		return Usagef("--max-restarts must be 0 or more")
	}
	saveOn, err := saveOnSignal(o.SaveOn)
	if err != nil {
		return err
	}
	o.SaveOn = saveOn
	var limit uint64
	if o.MemoryLimit != "" {
		var err error
		if limit, err = parseBytes(o.MemoryLimit); err != nil {
			return Usagef("--memory-limit: %v", err)
		}
		if limit < 4<<20 {
			return Usagef("--memory-limit %s is too small: give at least 4m", o.MemoryLimit)
		}
	}
	if o.ResumeFrom != "" {
		// A directory that does not exist yet is the first run of an
		// auto-resume setup (the job creates it): nothing to resume yet.
		switch st, err := os.Stat(o.ResumeFrom); {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return Usagef("--resume-from %s: %v", o.ResumeFrom, err)
		case !st.IsDir():
			return Usagef("--resume-from %s: not a directory", o.ResumeFrom)
		}
		if supervise.HasResumePlaceholder(o.Command) {
			if _, err := supervise.ResumeArg(o.ResumeFrom); err != nil {
				return Usagef("%v", err)
			}
		}
		if err := checkResumePlaceholder(o.Command); err != nil {
			return err
		}
	}
	if o.changed == nil {
		o.changed = func(string) bool { return false }
	}
	if err := o.adapt.check(o, o.changed, f.IO.ErrOut); err != nil {
		return err
	}
	if o.SampleInterval < minSampleInterval {
		return Usagef("--sample-interval %v: give at least 50ms", o.SampleInterval)
	}
	if _, err := exec.LookPath(o.Command[0]); err != nil {
		return Usagef("cannot run %q: %v", o.Command[0], err)
	}
	if err := nameRun(ctx, f, o); err != nil {
		return err
	}
	// The GPU backend is opened before anything is recorded, so a missing
	// scenario file or driver is an error, not a run left behind as lost.
	gb, note, err := openGPU(ctx, o.Simulate, o.GPUBackend)
	if err != nil {
		return err
	}
	defer gb.Close()
	if o.Detach {
		return detach(ctx, f, o)
	}
	if note != "" {
		f.Logger().Info("gpu", "note", note)
	}
	o.gpu = gb
	// A state database that cannot be written now (read-only, locked) does
	// not keep the job from running: the run is recorded elsewhere.
	rs, err := openRunStore(ctx, f)
	if err != nil {
		return err
	}
	defer rs.Close()
	st := rs.Store

	if limit > 0 {
		// Refuse before starting anything when no cgroup can be had.
		g, err := cgroup.Create("vramguard-check", limit)
		if err != nil {
			return Envf("--memory-limit: %v", err)
		}
		g.Remove()
	}

	id := o.detachedID
	if id == "" {
		id = newRunID(f.Now())
	}
	// The job's signals are caught before the run is recorded: once
	// `vramguard runs` shows it running, a SIGHUP (the terminal closing)
	// or a scheduler's SIGUSR1 is the supervisor's to handle, not the
	// default action's, which would kill it and leave the run lost.
	o.sigs = catchSignals()
	defer signal.Stop(o.sigs)
	if o.Kernel {
		return runKernel(ctx, f, o, st, limit, id)
	}
	// A requeued Slurm job's task continues the run its earlier start made.
	if o.detachedID == "" {
		prev, next, err := requeuedRun(ctx, st, o.Command, os.Getenv)
		if err != nil {
			return Failf("find the run of the requeued Slurm job: %v", err)
		}
		if prev != nil {
			fmt.Fprintf(f.IO.ErrOut, "vramguard: %s\n", requeueNotice(prev, next, os.Getenv))
			err = superviseRun(ctx, f, o, st, prev, limit, next)
			rs.finish(ctx, f, prev.ID)
			return err
		}
	}
	me, _ := procfs.FS{}.Proc(os.Getpid())
	cwd, _ := os.Getwd()
	run := &store.Run{ID: id, Name: o.recordName(), Command: o.Command, Cwd: cwd, Status: store.StatusRunning,
		StartedAt: f.Now(), SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks,
		Detached: o.detachedID != "", Dir: supervise.RunDir(rs.home, id), Group: o.groupFl.group(os.Getenv)}
	if err := createRun(ctx, f, o, st, run); err != nil {
		return err
	}
	markSlurmTask(run, os.Getenv)
	err = superviseRun(ctx, f, o, st, run, limit, 1)
	rs.finish(ctx, f, id)
	return err
}

// catchSignals starts delivering the signals a supervisor takes for its
// job (supervise.JobSignals): a stop (SIGINT, SIGTERM, SIGHUP) or a signal
// the job may handle (a scheduler's SIGUSR1 warning among them). The
// supervisor's own requests come over its control socket, never a signal.
func catchSignals() chan os.Signal {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, supervise.JobSignals...)
	return sigs
}

// foreground reports whether this process runs in the foreground of the
// terminal on its stdin: a SIGINT then comes from a person's Ctrl-C.
func foreground() bool {
	pgrp, err := unix.IoctlGetInt(int(os.Stdin.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// listenControl opens the run's control socket (stop, kill and restart
// requests, runctl.Request) where its path is short and private; a
// failure leaves the run without one, which `vramguard stop` and `restart`
// then say.
func listenControl(f *Factory, run *store.Run) (<-chan runctl.Op, func()) {
	// A random name, as the probe socket's: socket names are readable by
	// every user in /proc/net/unix, and a run id is for its owner.
	sock, cleanup, note, err := probe.SupervisorSocket(f.Getenv, "c"+strings.TrimPrefix(supervisorSocketName(), "s"))
	if err != nil {
		fmt.Fprintf(f.IO.ErrOut, "vramguard: no control socket (stop and restart will not reach this run): %v\n", err)
		return nil, func() {}
	}
	if note != "" {
		f.Logger().Info("control socket", "note", note)
	}
	c, err := runctl.ListenControl(run.Dir, sock)
	if err != nil {
		cleanup()
		fmt.Fprintf(f.IO.ErrOut, "vramguard: no control socket (stop and restart will not reach this run): %v\n", err)
		return nil, func() {}
	}
	return c.Requests(), func() { c.Close(); cleanup() }
}

// superviseRun supervises a recorded run from attempt first on and maps the
// outcome to vramguard's exit status.
func superviseRun(ctx context.Context, f *Factory, o *RunOptions, st *store.Store, run *store.Run, limit uint64, first int) error {
	self, err := os.Executable()
	if err != nil {
		return Envf("find the vramguard executable: %v", err)
	}
	gb := o.gpu
	sigs := o.sigs
	requests, closeControl := listenControl(f, run)
	defer closeControl()

	id := run.ID
	so := supervise.Options{
		RunID: id, Name: run.Name, Command: o.Command, Env: append(o.groupFl.env(os.Environ(), os.Getenv), saveOnVar+"="+o.SaveOn), RunDir: run.Dir, FirstAttempt: first,
		Store: st, GPU: gb, Proc: procfs.FS{}, Cgroup: cgroup.Reader{},
		Notify: f.IO.ErrOut, Signals: sigs, Requests: requests, Terminal: foreground,
		SampleInterval: o.SampleInterval, MemoryLimit: limit,
		Restart: o.Restart, MaxRestarts: o.MaxRestarts, BackoffInitial: o.Backoff, BackoffMax: o.BackoffMax,
		StableAfter: o.StableAfter, ResumeFrom: o.ResumeFrom, StallTimeout: o.StallTimeout, StopTimeout: o.StopTimeout,
		OOMWarning: o.OOMWarning, Detached: run.Detached, Self: self, Logger: f.Logger(), Now: f.Now,
	}
	if !so.Detached {
		so.Stdin, so.Stdout, so.Stderr = f.IO.In, f.IO.Out, f.IO.ErrOut
	}
	if o.JSON {
		so.Notify = discardNotify{}
		so.Stdout = f.IO.ErrOut // keep stdout for the JSON document
	}
	if !o.NoProbe {
		if h, closeProbe := probeHook(f, o, run); h != nil {
			defer closeProbe()
			so.Probe = h
		}
	}
	if !so.Detached && !o.JSON {
		// the shared agent's notices (an idle job of this user's) reach
		// the run's terminal too
		defer watchNotices(ctx, f, so.Notify)()
	}
	so.UnsavedWarning = o.UnsavedWarning
	so.Adapt = adaptOptions(f, o)
	if rec := o.groupFl.recorder(f, run); rec != nil {
		so.Group = rec
	}
	so.PriorAutosave = o.priorAutosave
	res, err := supervise.Run(ctx, so)
	if err != nil {
		st.FinishRun(context.WithoutCancel(ctx), id, store.StatusFinished, "start_failed", 1, f.Now(), nil)
		if supervise.IsUnsafeResume(err) {
			return Usagef("%v", err)
		}
		if strings.Contains(err.Error(), "memory cgroup") {
			return Envf("%v", err)
		}
		return Failf("%v", err)
	}
	if err := rememberFit(f, o, res); err != nil {
		fmt.Fprintf(f.IO.ErrOut, "vramguard: could not remember the settings that fit: %v\n", err)
	}
	if o.JSON {
		if err := f.WriteJSON(res.Postmortem); err != nil {
			return err
		}
	}
	return Silent(res.ExitStatus)
}

type discardNotify struct{}

func (discardNotify) Write(p []byte) (int, error) { return len(p), nil }

// detach starts a background supervisor in its own session and returns
// once its run is recorded.
// detachedIDVar carries a detached run's id to its background supervisor.
const detachedIDVar = "VRAMGUARD_DETACHED_RUN_ID"

func detach(ctx context.Context, f *Factory, o *RunOptions) error {
	self, err := os.Executable()
	if err != nil {
		return Envf("find the vramguard executable: %v", err)
	}
	id := newRunID(f.Now())
	// A state directory that cannot be written now does not keep the job
	// from running: the background supervisor records it elsewhere.
	home := f.Home()
	if why := homeWritable(ctx, home); why != nil {
		if home, err = fallbackHome(f, why); err != nil {
			return err
		}
	}
	dir := supervise.RunDir(home, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Envf("create %s: %v", dir, err)
	}
	// the run id goes in the environment, which only its user reads: a
	// command line is every user's to read in ps
	args := []string{"--home", home, "run"}
	args = append(args, detachArgs(os.Args, o)...)
	logf, err := os.OpenFile(filepath.Join(dir, "supervisor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return Envf("%v", err)
	}
	defer logf.Close()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), detachedIDVar+"="+id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Failf("start the background supervisor: %v", err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	st, err := store.Open(home)
	if err != nil {
		return storeErr(err)
	}
	defer st.Close()
	deadline := time.Now().Add(10 * time.Second)
	var rec *store.Run
	for {
		if r, err := st.Resolve(ctx, id); err == nil && r.ID == id {
			rec = r
			break
		}
		if time.Now().After(deadline) || !runctl.Alive(procfs.FS{}, pid, 0) {
			b, _ := os.ReadFile(filepath.Join(dir, "supervisor.log"))
			return Failf("the background supervisor did not start: %s", strings.TrimSpace(string(b)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if o.JSON {
		return f.WriteJSON(map[string]any{"id": id, "name": rec.Name, "supervisor_pid": pid, "dir": dir})
	}
	fmt.Fprintln(f.IO.Out, id)
	pre := ""
	if home != f.Home() {
		pre = "VRAMGUARD_HOME=" + home + " "
	}
	fmt.Fprintf(f.IO.ErrOut, "vramguard: running in the background as %s\n  follow: %svramguard logs -f %s\n  stop:   %svramguard stop %s\n", id, pre, id, pre, id)
	return nil
}

// detachArgs rebuilds the run flags for the background supervisor, without
// --detach and --json.
func detachArgs(argv []string, o *RunOptions) []string {
	var out []string
	add := func(flag, v string) { out = append(out, "--"+flag+"="+v) }
	if o.Name != "" {
		add("name", o.Name)
	}
	if o.MemoryLimit != "" {
		add("memory-limit", o.MemoryLimit)
	}
	add("restart", o.Restart)
	add("max-restarts", fmt.Sprint(o.MaxRestarts))
	add("backoff", o.Backoff.String())
	add("backoff-max", o.BackoffMax.String())
	add("stable-after", o.StableAfter.String())
	if o.ResumeFrom != "" {
		abs, _ := filepath.Abs(o.ResumeFrom)
		add("resume-from", abs)
	}
	add("stall-timeout", o.StallTimeout.String())
	add("stop-timeout", o.StopTimeout.String())
	add("oom-warning", o.OOMWarning.String())
	add("unsaved-warning", o.UnsavedWarning.String())
	add("probe-hz", fmt.Sprint(o.ProbeHz))
	if o.NoProbe {
		out = append(out, "--no-probe")
	}
	if o.OOMSnapshot {
		out = append(out, "--oom-snapshot")
	}
	if o.AtomicSave {
		out = append(out, "--atomic-save")
	}
	add("sample-interval", o.SampleInterval.String())
	add("gpu-backend", o.GPUBackend)
	if o.Simulate != "" {
		abs, _ := filepath.Abs(o.Simulate)
		add("simulate", abs)
	}
	return append(append(out, "--"), o.Command...)
}

// saveOnVar passes --save-on to the probe's vramguard.autosave().
const saveOnVar = "VRAMGUARD_SAVE_ON"

// saveOnSignal is the canonical name of a --save-on signal: one the
// supervisor delivers to its job and the job may handle (SIGUSR2 is the
// probe's own, for stacks).
func saveOnSignal(v string) (string, error) {
	n := strings.ToUpper(strings.TrimSpace(v))
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	switch n {
	case "SIGUSR1", "SIGTERM", "SIGINT", "SIGHUP":
		return n, nil
	}
	return "", Usagef("--save-on %s: give SIGUSR1, SIGTERM, SIGINT or SIGHUP (the signals a scheduler warns with)", v)
}
