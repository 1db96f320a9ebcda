// Package supervise runs a job and watches it: its own process group below
// a subreaping shim (and its own memory cgroup when asked), every byte of its
// output logged with timestamps, its process tree's memory sampled, its
// death classified, its restarts decided, and nothing of it left running
// afterwards. It writes to the store and to the writers it is given; it never
// touches the terminal directly.
package supervise

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/adapt"
	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/termsafe"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Restart policies.
const (
	RestartNever     = "never"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

// Options configure one supervised run.
type Options struct {
	RunID   string
	Name    string
	Command []string
	// Env is the job's base environment (os.Environ() normally).
	Env []string
	Dir string // working directory; "" for the current one
	// RunDir holds the run's logs and artefacts.
	RunDir string
	// FirstAttempt numbers the first attempt (1 for a new run; more when a
	// run continues, e.g. a restarted Jupyter kernel).
	FirstAttempt int
	Store        *store.Store
	// GPU is the backend a Sampler is made from when Sampler is nil.
	GPU gpu.Backend
	// Sampler is the one reader of the GPU backend: the job's tree is read
	// through it (sampler.JobWatch), never by polling the backend here.
	Sampler *sampler.Sampler
	// Proc and Cgroup are the /proc and cgroup trees the job is read from.
	Proc   procfs.FS
	Cgroup cgroup.Reader

	// Stdin is given to the job (nil: /dev/null). Stdout and Stderr receive
	// the job's output as it arrives (nil: log only). Notify receives
	// vramguard's own lines (post-mortem, restarts).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Notify         io.Writer
	// Signals delivers the signals the supervisor received (JobSignals):
	// each is the job's (control.go says what becomes of each).
	Signals <-chan os.Signal
	// Requests delivers the requests of the run's control socket
	// (runctl.ListenControl): stop, kill, restart; nil: none.
	Requests <-chan runctl.Op
	// Terminal reports whether the supervisor runs in the foreground of a
	// terminal now, so that a SIGINT is a person's Ctrl-C: a second one
	// then kills the job. nil: never.
	Terminal func() bool

	SampleInterval time.Duration
	MemoryLimit    uint64
	Restart        string
	MaxRestarts    int
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// StableAfter is how long an attempt must run before its failure is
	// retried; earlier failures are startup failures.
	StableAfter  time.Duration
	ResumeFrom   string
	StallTimeout time.Duration
	// OOMWarning raises an alert when the OOM forecast falls below it
	// (default 10 minutes).
	OOMWarning time.Duration
	// UnsavedWarning warns when training ran this long since the last
	// checkpoint (0 disables; needs a Hook that sees checkpoints).
	UnsavedWarning time.Duration
	// StopTimeout is how long a job stopped or restarted by request
	// (runctl.OpStop, OpRestart) gets after SIGTERM before it is killed. A
	// job stopped by a signal is never killed by the supervisor: its sender
	// has its own deadline.
	StopTimeout time.Duration
	Detached    bool

	// Self is the vramguard executable that runs the shim.
	Self   string
	Logger *slog.Logger
	Now    func() time.Time
	// Probe is the in-process probe; nil: none (--no-probe).
	Probe Probe
	// Adapt, when set, changes the settings of the next attempt after one
	// that died of memory (run --adapt; package adapt).
	Adapt *Adapt
	// PriorAutosave is a notebook kernel's newest autosave written before
	// this supervisor started (an earlier kernel's; run --kernel reads it
	// from the store), so a post-mortem can say how old the newest one was
	// even when the dying kernel saved none; nil: none.
	PriorAutosave *postmortem.Autosave
	// Group, when set, hears each attempt's post-mortem once its ranks are
	// judged and before it is recorded: it shares the ranks with the
	// job's other nodes and may name a first failure recorded there
	// (groups.Recorder); nil: a run of no group.
	Group GroupRecorder
}

// GroupRecorder shares a distributed job's ranks across its supervisors.
type GroupRecorder interface {
	Ended(ctx context.Context, pm *postmortem.Postmortem)
}

// Adapt configures run --adapt: the settings of the first attempt and the
// policy that changes them.
type Adapt struct {
	Initial adapt.Settings
	Policy  adapt.Policy
}

// Probe is what a supervisor asks of the in-process probe inside the job
// (probe.Hook implements it; cli asserts so). Env puts the probe into an
// attempt's environment; Started begins an attempt; Progress is when the
// job last made training progress (optimizer steps, saves) and
// LastCheckpoint when it last saved one; FillSample adds PyTorch's
// allocator figures to a sample of the job; PIDs lists the probed processes
// (the only ones that may take StackSignal); Finish adds the probe's section
// to the post-mortem once the attempt ended; Processes is what each probed
// process reported of itself (steps, peaks, its torch.distributed rank, its
// uncaught exception, when it ended), for the account of a distributed
// job's ranks; Events hands out, once each, the timeline events the
// probe's messages made (a notebook kernel's cells and autosaves).
type Probe interface {
	Env(env []string, attempt int) []string
	Started(attempt, pid int)
	Progress() time.Time
	LastCheckpoint() (time.Time, bool)
	FillSample(s *timeline.Sample)
	PIDs() []int
	Finish(pm *postmortem.Postmortem)
	Processes() []ranks.Probed
	Events() []timeline.Event
}

// KernelShutdowns is what a Probe may also tell of the attempt that just
// ended: whether a notebook kernel's client asked the kernel to shut down
// (asked) and whether to restart it (restart), as Jupyter's
// shutdown_request does. A client that does so sends SIGTERM when the
// kernel has not ended after half of its shutdown_wait_time, and SIGKILL
// after the rest; the attempt's verdict takes them for part of the request
// (restarted, or success), not for a user's stop. The call may wait until
// the attempt's probe connections have closed.
type KernelShutdowns interface {
	KernelShutdown() (asked, restart bool)
}

// Result is how a whole run ended.
type Result struct {
	ExitStatus int
	Postmortem *Postmortem
}

func (o *Options) defaults() {
	if o.SampleInterval <= 0 {
		o.SampleInterval = time.Second
	}
	if o.Restart == "" {
		o.Restart = RestartNever
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = time.Second
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 5 * time.Minute
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.GPU == nil {
		o.GPU = gpu.None{}
	}
	if o.Sampler == nil {
		// New fails only without a backend, and there is one by now.
		o.Sampler, _ = sampler.New(sampler.Config{Backend: o.GPU, Now: o.Now})
	}
	if o.Notify == nil {
		o.Notify = io.Discard
	}
}

// Run supervises the job until it ends for good (no more restarts) and
// returns how it ended. The run must already exist in the store.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	if err := os.MkdirAll(o.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	s := &supervisor{o: o, requests: o.Requests, autosave: o.PriorAutosave}
	if o.Adapt != nil {
		s.settings = o.Adapt.Initial
	}
	var pm *Postmortem
	first := max(o.FirstAttempt, 1)
	// restarts counts the restarts the policy made; those asked for
	// (runctl.OpRestart) do not count against --max-restarts.
	restarts := 0
	for n := first; ; n++ {
		var err error
		pm, err = s.attempt(ctx, n)
		if err != nil {
			return nil, err
		}
		if s.restartNow {
			s.restartNow = false
			msg := fmt.Sprintf("attempt %d ended (restarted by request); attempt %d starts now", n, n+1)
			s.notifyf("%s", msg)
			s.event(ctx, n, "restart", msg, map[string]any{"by_request": true})
			continue
		}
		var next *adapt.Decision
		if o.Adapt != nil {
			next = s.adaptAfter(pm)
		}
		restart, why := s.shouldRestart(pm, restarts+1, next)
		if why != "" {
			pm.RestartDecision = why
		}
		if !restart {
			break
		}
		restarts++
		if next != nil && next.Step != nil {
			s.applyAdaptation(ctx, n, next)
		} else if next != nil && next.Note != "" {
			s.notifyf("%s", next.Note)
		}
		delay := backoff(o.BackoffInitial, o.BackoffMax, restarts)
		msg := fmt.Sprintf("attempt %d ended (%s); restarting in %s (restart %d of at most %d)",
			n, pm.Reason, delay.Round(100*time.Millisecond), restarts, o.MaxRestarts)
		s.notifyf("%s", msg)
		s.event(ctx, n, "restart", msg, nil)
		if s.interruptibleSleep(delay) {
			pm.RestartDecision = "stopped by the user while waiting to restart"
			if s.hangUp {
				pm.RestartDecision = "stopped while waiting to restart: the terminal closed (SIGHUP); --detach keeps a run going without a terminal"
			}
			break
		}
	}
	end := o.Now()
	pm.Attempts = first - 1 + len(s.attempts)
	b, _ := json.Marshal(pm)
	s.finishRun(ctx, pm.Reason, pm.ExitCode, end, b)
	s.printPostmortem(pm)
	return &Result{ExitStatus: pm.ExitCode, Postmortem: pm}, nil
}

type supervisor struct {
	o           Options
	attempts    []*Postmortem
	interrupted bool
	hangUp      bool // the stop was SIGHUP: the terminal closed
	// requests delivers the control socket's requests; restartNow is set
	// when the attempt that just ended was ended by a restart request;
	// pending is a stop or kill that came while no attempt ran.
	requests   <-chan runctl.Op
	restartNow bool
	pending    runctl.Op
	// Under --adapt: the settings the next attempt runs with, the changes
	// made so far, and what the policy read of the attempt before.
	settings adapt.Settings
	steps    []adapt.Step
	prev     *adapt.Ended
	// autosave is a notebook kernel's newest autosave so far (from
	// PriorAutosave, then each attempt's)
	autosave *postmortem.Autosave
}

func (s *supervisor) notifyf(format string, a ...any) {
	fmt.Fprintf(s.o.Notify, "vramguard: "+format+"\n", a...)
}

func (s *supervisor) event(ctx context.Context, attempt int, kind, msg string, data any) {
	var raw json.RawMessage
	if data != nil {
		raw, _ = json.Marshal(data)
	}
	s.eventAt(ctx, attempt, timeline.Event{T: s.o.Now(), Kind: kind, Message: msg, Data: raw})
}

// eventAt records an event that has its own time (the probe's).
func (s *supervisor) eventAt(ctx context.Context, attempt int, e timeline.Event) {
	if err := s.o.Store.AddEvent(context.WithoutCancel(ctx), &store.Event{RunID: s.o.RunID, Attempt: attempt, T: e.T, Kind: e.Kind, Message: e.Message, Data: e.Data}); err != nil {
		s.o.Logger.Warn("store event", "err", err)
	}
}

// shouldRestart applies the restart policy to an ended attempt; next is
// what --adapt decided (nil without it). An attempt with new settings is
// retried however soon it failed: the change is what the retry tests.
func (s *supervisor) shouldRestart(pm *Postmortem, n int, next *adapt.Decision) (bool, string) {
	o := s.o
	switch {
	case s.interrupted || pm.Reason == diagnose.Interrupted:
		return false, ""
	case o.Restart == RestartNever:
		return false, ""
	case pm.Reason == diagnose.Success && o.Restart != RestartAlways:
		return false, ""
	case n > o.MaxRestarts:
		return false, fmt.Sprintf("not restarted: --max-restarts %d reached", o.MaxRestarts)
	case next != nil && next.Exhausted:
		return false, "not restarted: " + next.Note
	case o.Restart == RestartAlways:
		return true, ""
	case diagnose.Deterministic(pm.Reason):
		return false, fmt.Sprintf("not restarted: %s fails the same way every time (use --restart always to retry anyway)", pm.Reason)
	case next != nil && next.Step != nil:
		return true, ""
	case pm.DurationS < o.StableAfter.Seconds():
		return false, fmt.Sprintf("not restarted: it failed %.1fs after starting, before --stable-after %s, so it counts as a startup failure", pm.DurationS, o.StableAfter)
	}
	return true, ""
}

// backoff is exponential from initial, capped at max, with jitter in
// [d/2, d] so restarts of many jobs do not synchronise.
func backoff(initial, max time.Duration, n int) time.Duration {
	d := initial
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + time.Duration(rand.Int63n(int64(half)+1))
}

// interruptibleSleep waits d; it returns true if the user stopped the run
// (a signal that ends the job, or a stop request). A restart request cuts
// the wait short; other signals have no job to go to.
func (s *supervisor) interruptibleSleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return false
		case op, ok := <-s.requests:
			if !ok {
				s.requests = nil
				continue
			}
			if op != runctl.OpRestart {
				s.interrupted = true
				return true
			}
			s.notifyf("restart requested: not waiting any longer")
			return false
		case sig, ok := <-s.o.Signals:
			if !ok {
				s.o.Signals = nil
				continue
			}
			if !endsJob(sig) || sig == syscall.SIGHUP && s.o.Detached {
				continue
			}
			s.interrupted = true
			s.hangUp = sig == syscall.SIGHUP
			return true
		}
	}
}

// printPostmortem writes the short post-mortem for people.
func (s *supervisor) printPostmortem(pm *Postmortem) {
	// The evidence quotes the job's log: show its escape sequences, never obey them.
	postmortem.RenderShort(termsafe.Writer(s.o.Notify), pm)
}

// RunDir is where a run's files live under the state directory.
func RunDir(home, id string) string { return filepath.Join(home, "runs", id) }
