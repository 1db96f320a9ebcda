package supervise

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/ckpt"
	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/joblog"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// attempt runs the command once and returns its post-mortem.
func (s *supervisor) attempt(ctx context.Context, n int) (*Postmortem, error) {
	o := s.o
	start := o.Now()
	pm := &Postmortem{RunID: o.RunID, Name: o.Name, Command: o.Command, Attempt: n, StartedAt: start}
	s.attempts = append(s.attempts, pm)
	pm.LogPath = filepath.Join(o.RunDir, fmt.Sprintf("attempt-%d.log", n))

	argv := append([]string(nil), o.Command...)
	env := jobEnv(o.Env, o.RunID, n)
	if o.ResumeFrom != "" {
		pm.Resume = s.findResume()
		if HasResumePlaceholder(argv) {
			arg, err := ResumeArg(pm.Resume.From)
			if err != nil {
				return nil, err
			}
			for i := range argv {
				argv[i] = strings.ReplaceAll(argv[i], "{resume}", arg)
			}
		}
		env = setEnv(env, "VRAMGUARD_RESUME", pm.Resume.From)
		if pm.Resume.From != "" {
			s.notifyf("attempt %d resumes from %s", n, ckpt.DisplayPath(pm.Resume.From))
		} else if pm.Resume.Missing {
			// the first run of an auto-resume setup: the job makes the directory
			s.notifyf("attempt %d starts fresh: %s does not exist yet (nothing to resume); the next attempt looks there again", n, ckpt.DisplayPath(s.o.ResumeFrom))
		}
		for _, sk := range pm.Resume.Skipped {
			s.notifyf("skipped checkpoint %s: %s", ckpt.DisplayPath(sk.Path), sk.Reason)
			s.event(ctx, n, timeline.KindResumeSkipped, sk.Path+": "+sk.Reason, sk)
		}
		if p := pm.Resume.Problem; p != "" {
			// training would silently start over: say so where it is seen
			msg := fmt.Sprintf("WARNING: attempt %d starts from scratch: %s", n, p)
			s.notifyf("%s", msg)
			s.event(ctx, n, timeline.KindResumeNone, msg, nil)
		}
	}
	if o.Adapt != nil {
		env = s.adaptSettings(pm, argv, env)
	}
	if o.Probe != nil {
		env = o.Probe.Env(env, n)
	}

	if err := o.Store.StartAttempt(context.WithoutCancel(ctx), &store.Attempt{RunID: o.RunID, N: n, StartedAt: start, LogPath: pm.LogPath, ResumeFrom: resumeFrom(pm)}); err != nil {
		// A store that cannot be written (a full disk) never stops the job.
		s.notifyf("could not record attempt %d in the state database: %v", n, err)
	}
	lw, err := joblog.Create(pm.LogPath, o.Now)
	if err != nil {
		return nil, err
	}
	defer lw.Close()
	lw.SetNotify(func(msg string) { s.notifyf("%s", msg) })

	var group *cgroup.Group
	if o.MemoryLimit > 0 {
		group, err = cgroup.Create(fmt.Sprintf("vramguard-%s-%d", o.RunID, n), o.MemoryLimit)
		if err != nil {
			return nil, err
		}
		defer func() {
			group.Kill(2 * time.Second)
			group.Remove()
		}()
	}

	// A request that came while no attempt ran is answered by this one.
	s.drainRequests()
	in := diagnose.Input{}
	a := &running{s: s, pm: pm, n: n, lw: lw, group: group, cells: newCellTrack(s.autosave),
		mon: monitor.New(monitor.Config{OOMWarning: o.OOMWarning, UnsavedAfter: o.UnsavedWarning, StallAfter: o.StallTimeout}, start.Truncate(time.Millisecond))}
	if err := a.start(argv, env); err != nil {
		in.StartErr = err
		in.ExitCode = 127
	} else {
		if o.Probe != nil {
			o.Probe.Started(n, a.jobPID)
		}
		o.Store.SetAttemptPID(context.WithoutCancel(ctx), o.RunID, n, a.jobPID)
		o.Store.SetJobPID(context.WithoutCancel(ctx), o.RunID, a.jobPID)
		a.watch(ctx)
		in = a.input()
		if ks, ok := o.Probe.(KernelShutdowns); ok {
			in.KernelShutdown, in.KernelRestart = ks.KernelShutdown()
		}
	}
	in.Tail = a.lw.Tail(200)
	v := diagnose.Classify(in)
	pm.Verdict = v
	pm.EndedAt = o.Now()
	pm.DurationS = pm.EndedAt.Sub(start).Seconds()
	pm.Memory = a.mem
	if o.Probe != nil {
		o.Probe.Finish(pm)
		a.probeEvents(ctx)
		postmortem.CaughtOOM(pm) // an exit 0 after an OOM the job caught
		postmortem.WarningSaves(pm)
	}
	postmortem.SchedulerEnd(pm) // what a scheduler's end lost, and what to set
	a.kernelSection(pm)
	if in.StartErr == nil {
		// a distributed job: each rank's end, and the rank that failed first
		a.judgeRanks(in, pm)
		if o.Group != nil {
			o.Group.Ended(ctx, pm)
		}
	}
	exitMsg := fmt.Sprintf("attempt %d ended: %s", n, pm.Reason)
	// (A kernel its client restarted is restarted by the client: the new
	// process is the next attempt, under a supervisor of its own.)
	if pm.Reason == diagnose.Restarted && in.Restarted && !s.interrupted {
		// Ended on request so that the next attempt starts at once.
		s.restartNow = true
		pm.RestartDecision = "restarted by request: the next attempt starts at once, whatever --restart says, and does not count against --max-restarts"
		exitMsg += " (restarted by request)"
	}
	if a.mem.Samples > 0 {
		sum := a.mon.Summary()
		pm.Monitor = &sum
		pm.Evidence = append(pm.Evidence, monitorEvidence(&sum)...)
	}
	if pm.Resume != nil {
		if pm.Resume.Problem != "" {
			pm.Evidence = append(pm.Evidence, "resume: the attempt started from scratch: "+pm.Resume.Problem)
		} else {
			for _, sk := range pm.Resume.Skipped {
				pm.Evidence = append(pm.Evidence, fmt.Sprintf("resume: skipped newer checkpoint %s (%s)", sk.Path, sk.Reason))
			}
		}
	}
	b, _ := json.Marshal(pm)
	if err := o.Store.FinishAttempt(context.WithoutCancel(ctx), o.RunID, n, pm.EndedAt, pm.ExitCode, pm.Reason, b); err != nil {
		o.Logger.Warn("store attempt", "err", err)
	}
	s.event(ctx, n, timeline.KindExit, exitMsg, map[string]any{"reason": pm.Reason, "exit_code": pm.ExitCode, "restarted_by_request": s.restartNow})
	return pm, nil
}

func resumeFrom(pm *Postmortem) string {
	if pm.Resume == nil {
		return ""
	}
	return pm.Resume.From
}

// findResume picks the newest checkpoint that passes the structural check.
func (s *supervisor) findResume() *Resume {
	r := &Resume{Dir: s.o.ResumeFrom, Skipped: []SkippedCkpt{}}
	if _, err := os.Stat(s.o.ResumeFrom); errors.Is(err, os.ErrNotExist) {
		r.Missing = true
		return r
	}
	res, err := ckpt.FindLatest(s.o.ResumeFrom)
	if err != nil {
		r.Problem = fmt.Sprintf("cannot look for checkpoints in %s: %v", s.o.ResumeFrom, err)
		return r
	}
	for _, e := range res.SkippedNewer {
		r.Skipped = append(r.Skipped, SkippedCkpt{Path: e.Path, Reason: e.Reason})
	}
	if res.Best != nil {
		r.From = res.Best.Path
	} else if p := res.Problem(); p != nil {
		// checkpoints were saved and none can be resumed from
		r.Problem = p.Error()
	}
	return r
}

func jobEnv(base []string, runID string, n int) []string {
	env := append([]string(nil), base...)
	if getEnv(env, "PYTHONUNBUFFERED") == "" {
		env = setEnv(env, "PYTHONUNBUFFERED", "1")
	}
	env = setEnv(env, "VRAMGUARD_RUN_ID", runID)
	env = setEnv(env, "VRAMGUARD_ATTEMPT", strconv.Itoa(n))
	return env
}

func getEnv(env []string, k string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v
		}
	}
	return ""
}

// lookupEnv finds k in env.
func lookupEnv(env []string, k string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v, true
		}
	}
	return "", false
}

func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, k+"=") {
			out = append(out, e)
		}
	}
	return append(out, k+"="+v)
}

// running is one attempt in flight.
type running struct {
	s     *supervisor
	pm    *Postmortem
	n     int
	lw    *joblog.Writer
	group *cgroup.Group

	shim     *exec.Cmd
	shimPID  int
	jobPID   int
	status   *bufio.Reader
	statusR  *os.File
	copies   sync.WaitGroup
	shimDone chan error

	mu          sync.Mutex
	lastOutput  time.Time
	lastCPU     uint64
	lastCPUTime time.Time
	seen        map[int]bool
	mem         MemStats
	// oomStart is the oom_kill count of the cgroup the job runs in (its
	// own or the one it sits in) at the start; cgDir that cgroup
	oomStart  uint64
	cgDir     string
	cgVersion int
	// job reads the job's tree through the sampler; last is its newest
	// sample's tree figure
	job           *sampler.JobWatch
	last          lastSample
	water         limitWater
	interrupted   bool
	hangUp        bool // the stop was SIGHUP: the terminal closed
	restarting    bool // ended by a restart request
	stalled       bool
	stallDesc     string
	stacks        []string
	stackFiles    map[int]string // pid -> the file its stacks went to
	final         statusMsg
	haveFinal     bool
	startedUptime float64
	// mon turns the attempt's samples, output and progress into events
	mon *monitor.Monitor
	// verdict is the monitor's verdict last recorded (a verdict event).
	verdict string
	// exits is how each process of the job ended; procs what was seen of
	// each while it ran; rankOf the probe's torch.distributed view
	exits  *exitWatch
	procs  map[int]*procSeen
	rankOf map[int]*ranks.Identity
	// cells follows a notebook kernel's cells and autosaves
	cells *cellTrack

	// stopSignal is the signal that stopped the attempt (0: none);
	// repeatNoted is set once a repeat of it was noted
	stopSignal  syscall.Signal
	repeatNoted bool
	// stop is the signal that ended the job, for diagnose (noteStop)
	stop *diagnose.Stop
}

// probeEvents records the events the probe's messages made (a notebook
// kernel's cells and autosaves) at the probe's times, and follows them.
func (a *running) probeEvents(ctx context.Context) {
	for _, e := range a.s.o.Probe.Events() {
		a.s.eventAt(ctx, a.n, e)
		a.cells.event(e)
	}
}

// kernelSection adds a notebook kernel's cells to the post-mortem, and to
// its evidence the cell that was running at the end and the age of the
// newest autosave.
func (a *running) kernelSection(pm *Postmortem) {
	k := a.cells.section(pm.EndedAt)
	if k == nil {
		return
	}
	pm.Kernel = k
	if k.Autosave != nil {
		as := *k.Autosave
		as.AgeS = 0
		a.s.autosave = &as
	}
	if l := k.RunningLine(); l != "" {
		pm.Evidence = append(pm.Evidence, fmt.Sprintf("the kernel ended while %s: %s", l, k.Running.FirstLine))
	}
	if l := k.AutosaveLine(); l != "" && pm.Reason != diagnose.Success {
		pm.Evidence = append(pm.Evidence, l+" when the kernel ended")
	}
}

// analyse completes a sample with the probe's allocator figures and the
// limit in force, and hands it to the monitor; what the monitor raises is a
// line on the terminal and an event.
func (a *running) analyse(ctx context.Context, now time.Time, rss uint64, x *store.Sample) {
	o := a.s.o
	if o.Probe != nil {
		o.Probe.FillSample(x)
	}
	// The store keeps milliseconds: the monitor sees the times a replay of
	// the stored timeline will see, so `analyze RUN` agrees with it.
	x.T = x.T.Truncate(time.Millisecond)
	if x.Limit == 0 && a.mem.Limit > 0 {
		x.Limit, x.LimitSource = a.mem.Limit, a.mem.LimitSource
	}
	a.emit(ctx, a.mon.Observe(x))
	// Views that read the store (top, serve) show the run's own verdict:
	// record it when it changes (a leak has its own event). Quietly: the
	// terminal hears of leaks and forecasts only.
	if sum := a.mon.Summary(); sum.Verdict != a.verdict {
		a.verdict = sum.Verdict
		if sum.Verdict != "leak" {
			d := timeline.VerdictData{Verdict: sum.Verdict, Series: sum.Series, Samples: sum.Samples}
			a.s.event(ctx, a.n, timeline.KindVerdict, fmt.Sprintf("the monitor's verdict is now %s", sum.Verdict), d)
		}
	}
}

// emit sends the monitor's events to the terminal and the store.
func (a *running) emit(ctx context.Context, evs []timeline.Event) {
	for _, e := range evs {
		a.s.notifyf("%s", e.Message)
		a.s.event(ctx, a.n, e.Kind, e.Message, e.Data)
	}
}

// monitorEvidence says what the monitor saw during the attempt, for the
// post-mortem: when a leak was first seen and what the forecast was.
func monitorEvidence(sum *monitor.Summary) []string {
	var out []string
	if l := sum.Leak; l != nil {
		what := "GPU memory leak"
		if l.Series == "rss" {
			what = "host memory leak"
		} else if l.Ambiguous {
			what = "GPU memory growth (leak or fragmentation)"
		}
		line := fmt.Sprintf("the monitor raised a %s at %s (t=%.0fs): +%s/s since t=%.0fs", what,
			l.DetectedAt.Local().Format("15:04:05"), l.DetectedS, units.FormatBytes(l.LeakRate), l.LeakStartS)
		if l.OOMETA != nil {
			line += fmt.Sprintf(", forecast then: out of memory in about %s", analyze.FormatDuration(*l.OOMETA))
		}
		out = append(out, line)
	}
	if f := sum.Forecast; f != nil && f.OOMETA != nil {
		line := fmt.Sprintf("the monitor forecast the OOM at %s (t=%.0fs): out of memory in about %s",
			f.DetectedAt.Local().Format("15:04:05"), f.DetectedS, analyze.FormatDuration(*f.OOMETA))
		if f.Basis == "runway" {
			// a forecast from the rate alone: say so, it is no leak verdict
			line += fmt.Sprintf(" at the %s/s it rose since t=%.0fs (a forecast from the rate, not a leak verdict)", units.FormatBytes(f.LeakRate), f.LeakStartS)
		}
		out = append(out, line)
	}
	return out
}

// start launches the shim and waits for it to report the job's PID.
func (a *running) start(argv, env []string) error {
	o := a.s.o
	outR, outW, err := blockingPipe("stdout")
	if err != nil {
		return err
	}
	errR, errW, err := blockingPipe("stderr")
	if err != nil {
		return err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		return err
	}
	// A bigger pipe lets a burst of output wait in the kernel instead of
	// blocking the job on every 64 KiB; failure just keeps the default.
	for _, p := range []*os.File{outR, errR} {
		if rc, err := p.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
		}
	}
	args := []string{ShimCommand, "--parent", strconv.Itoa(os.Getpid())}
	if a.group != nil && a.group.ProcsFile() != "" {
		args = append(args, "--cgroup-procs", a.group.ProcsFile())
	}
	args = append(append(args, "--"), argv...)
	path := o.Self
	if a.group != nil && len(a.group.Wrap) > 0 {
		args = append(append(append([]string(nil), a.group.Wrap[1:]...), o.Self), args...)
		path = a.group.Wrap[0]
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = o.Dir
	cmd.Stdout, cmd.Stderr = outW, errW
	if o.Stdin != nil {
		cmd.Stdin = o.Stdin
	}
	cmd.ExtraFiles = []*os.File{stW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: shimKillSignal}
	a.startedUptime = uptime()

	// PR_SET_PDEATHSIG fires when the thread that forked exits, so the
	// shim is started and waited for on one locked OS thread.
	started := make(chan error, 1)
	a.shimDone = make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		a.shimDone <- cmd.Wait()
	}()
	err = <-started
	outW.Close()
	errW.Close()
	stW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		stR.Close()
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	a.shim = cmd
	a.shimPID = cmd.Process.Pid
	a.exits = newExitWatch(o.Proc, o.Now)
	a.lastOutput = o.Now()
	a.copies.Add(2)
	activity := func(int) {
		a.mu.Lock()
		a.lastOutput = o.Now()
		a.mu.Unlock()
	}
	go func() { defer a.copies.Done(); joblog.Copy(a.lw, 'o', outR, o.Stdout, activity); outR.Close() }()
	go func() { defer a.copies.Done(); joblog.Copy(a.lw, 'e', errR, o.Stderr, activity); errR.Close() }()

	a.statusR = stR
	a.status = bufio.NewReader(stR)
	line, err := a.status.ReadBytes('\n')
	var m statusMsg
	if err != nil || json.Unmarshal(line, &m) != nil {
		<-a.shimDone
		a.copies.Wait()
		return fmt.Errorf("start %s: the job did not start", argv[0])
	}
	if m.Event == "start_error" {
		<-a.shimDone
		a.copies.Wait()
		return fmt.Errorf("start %s: %s", argv[0], m.Error)
	}
	a.jobPID = m.PID
	a.seen = map[int]bool{m.PID: true}
	if a.group != nil && a.group.Dir != "" {
		a.cgDir, a.cgVersion = a.group.Dir, a.group.Version
	} else if dir, v, err := o.Cgroup.MemoryDir(a.jobPID); err == nil {
		a.cgDir, a.cgVersion = dir, v
	}
	if a.cgDir != "" {
		if m, err := cgroup.ReadMemory(a.cgDir, a.cgVersion); err == nil {
			a.oomStart = m.OOMKills
		}
	}
	spec := sampler.JobSpec{Root: a.shimPID, Main: a.jobPID, Proc: o.Proc, Cgroups: o.Cgroup, RankOf: a.probeRank}
	if a.group != nil && a.group.Dir != "" {
		spec.Cgroup, spec.CgroupVersion = a.group.Dir, a.group.Version
	}
	a.job = o.Sampler.WatchJob(spec)
	return nil
}

// watch samples the job and handles signals until the shim exits.
func (a *running) watch(ctx context.Context) {
	o := a.s.o
	tick := time.NewTicker(o.SampleInterval)
	defer tick.Stop()
	var stopTimer <-chan time.Time
	finalCh := make(chan statusMsg, 1)
	go func() {
		defer a.statusR.Close()
		defer close(finalCh)
		for {
			line, err := a.status.ReadBytes('\n')
			if err != nil {
				return
			}
			var m statusMsg
			if json.Unmarshal(line, &m) != nil {
				continue
			}
			if m.Event == "reaped" {
				a.exits.reaped(m)
				continue
			}
			finalCh <- m
			return
		}
	}()
	a.sample(ctx)
	killAll := func() { _ = syscall.Kill(a.shimPID, shimKillSignal) }
	// Ctrl-Z stops the supervisor, which the terminal signals, but not the
	// job, which runs in a session of its own: without this the job would
	// run on, stalled on a full pipe, while the shell says "Stopped". So the
	// job is stopped with the supervisor and continued with it (fg, bg), as
	// when it runs directly. Only while an attempt runs: between attempts
	// Ctrl-Z stops the supervisor as usual. SIGCONT is also a scheduler's
	// (Slurm sends it before SIGTERM): the job gets it either way.
	jobctl := make(chan os.Signal, 2)
	signal.Notify(jobctl, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(jobctl)
	if op := a.s.pending; op != "" {
		a.s.pending = ""
		a.request(ctx, op, &stopTimer, killAll)
	}
	for {
		select {
		case sig := <-jobctl:
			if sig == syscall.SIGTSTP {
				// SIGSTOP, as the job's group is orphaned (its session is
				// its own), where the kernel drops a SIGTSTP
				a.signalJob(syscall.SIGSTOP, true)
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				continue
			}
			// continued (fg, bg, or kill -CONT): the job goes on too, and
			// the time it stood still is no stall
			a.signalJob(syscall.SIGCONT, true)
			a.mon.Output(o.Now())
		case err := <-a.shimDone:
			_ = err
			if m, ok := <-finalCh; ok {
				a.final, a.haveFinal = m, true
			}
			a.waitCopies()
			a.sample(ctx)
			return
		case sig, ok := <-o.Signals:
			if !ok {
				o.Signals = nil
				continue
			}
			a.signalled(ctx, sig.(syscall.Signal), killAll)
		case op, ok := <-a.s.requests:
			if !ok {
				a.s.requests = nil
				continue
			}
			a.request(ctx, op, &stopTimer, killAll)
		case <-stopTimer:
			a.s.notifyf("the job did not stop within %s; killing it", o.StopTimeout)
			killAll()
		case <-tick.C:
			a.sample(ctx)
			if a.check(ctx, o.Now()) {
				killAll()
			}
		}
	}
}

// signalled handles a signal the supervisor received (control.go): one that
// ends the job is forwarded once and never escalates, unless it is a
// person's second Ctrl-C; any other is delivered each time.
func (a *running) signalled(ctx context.Context, sig syscall.Signal, killAll func()) {
	o := a.s.o
	if !endsJob(sig) {
		a.signalJob(sig, sig == syscall.SIGUSR2)
		a.s.event(ctx, a.n, timeline.KindSignal, diagnose.SignalName(sig)+" delivered to the job", map[string]any{"signal": diagnose.SignalName(sig)})
		if sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 {
			a.s.notifyf("%s delivered to the job", diagnose.SignalName(sig))
		}
		return
	}
	if sig == syscall.SIGHUP && o.Detached {
		return
	}
	terminal := o.Terminal != nil && o.Terminal()
	if a.stopSignal != 0 || a.interrupted && !a.restarting {
		if sig == syscall.SIGINT && terminal {
			a.s.notifyf("killing the job (Ctrl-C again)")
			killAll()
			return
		}
		if !a.repeatNoted {
			a.repeatNoted = true
			a.s.notifyf("%s again: the job has it already; waiting for it to end (its sender decides when to kill it)", diagnose.SignalName(sig))
		}
		return
	}
	a.interrupted, a.s.interrupted = true, true
	a.stopSignal = sig
	a.noteStop(sig, terminal)
	fwd := sig
	if sig == syscall.SIGHUP {
		a.hangUp, a.s.hangUp = true, true
		// a job that handles SIGHUP gets it; one that does not would die
		// of it at once, with no chance to save, so it gets SIGTERM
		if !catches(o.Proc, a.jobPID, syscall.SIGHUP) {
			fwd = syscall.SIGTERM
		}
		a.s.notifyf("the terminal closed (SIGHUP): stopping the job; run it with --detach to keep it running without a terminal")
	}
	again := "vramguard waits for it to end"
	if terminal {
		again = "Ctrl-C again to kill it"
	}
	a.s.notifyf("stopping the job (%s forwarded; %s)", diagnose.SignalName(fwd), again)
	a.s.event(ctx, a.n, timeline.KindStop, "stopped by "+diagnose.SignalName(sig), map[string]any{"signal": diagnose.SignalName(sig), "forwarded": diagnose.SignalName(fwd)})
	a.signalJob(fwd, false)
}

// request handles a request of the control socket: stop (SIGTERM, SIGKILL
// after the stop timeout), kill (SIGKILL now), restart (a stop, then the
// next attempt at once).
func (a *running) request(ctx context.Context, op runctl.Op, stopTimer *<-chan time.Time, killAll func()) {
	o := a.s.o
	switch op {
	case runctl.OpKill:
		if !a.interrupted || a.restarting {
			a.interrupted, a.s.interrupted = true, true
			a.s.event(ctx, a.n, timeline.KindStop, "stopped by request (kill)", map[string]any{"request": string(op)})
		}
		a.s.notifyf("killing the job (stop --kill)")
		killAll()
	case runctl.OpStop:
		if a.interrupted && !a.restarting {
			a.s.notifyf("stop requested while the job is being stopped; still waiting for it to end")
			return
		}
		a.interrupted, a.s.interrupted = true, true
		a.s.notifyf("stopping the job (SIGTERM; it is killed in %s)", o.StopTimeout)
		a.s.event(ctx, a.n, timeline.KindStop, "stopped by request (vramguard stop)", map[string]any{"request": string(op)})
		a.signalJob(syscall.SIGTERM, false)
		*stopTimer = time.After(o.StopTimeout)
	case runctl.OpRestart:
		switch {
		case a.interrupted || a.s.interrupted:
			a.s.notifyf("restart requested while the job is being stopped; the stop stands")
			return
		case a.restarting:
			a.s.notifyf("killing the job")
			killAll()
			return
		}
		a.restarting = true
		a.s.notifyf("restart requested: ending attempt %d (SIGTERM; again to kill it, or it is killed in %s), then attempt %d starts", a.n, o.StopTimeout, a.n+1)
		a.s.event(ctx, a.n, timeline.KindRestartRequested, fmt.Sprintf("restart requested: attempt %d is ended (SIGTERM, SIGKILL after %s) and attempt %d starts", a.n, o.StopTimeout, a.n+1), nil)
		a.signalJob(syscall.SIGTERM, false)
		*stopTimer = time.After(o.StopTimeout)
	}
}

// signalJob sends sig to the job's process group (the job and the workers
// it forked), and with tree to every other process below the shim too (one
// that started a session of its own).
func (a *running) signalJob(sig syscall.Signal, tree bool) {
	_ = syscall.Kill(-a.jobPID, sig)
	if !tree {
		return
	}
	all, err := procfs.FS{}.All()
	if err != nil {
		return
	}
	for _, p := range procfs.Tree(all, a.shimPID)[1:] {
		if p.PGID != a.jobPID {
			_ = syscall.Kill(p.PID, sig)
		}
	}
}

// catches reports whether process pid has a handler of its own for sig
// (SigCgt in /proc/PID/status).
func catches(fs procfs.FS, pid int, sig syscall.Signal) bool {
	root := fs.Root
	if root == "" {
		root = "/"
	}
	b, err := os.ReadFile(filepath.Join(root, "proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// drainRequests drops restart requests that are waiting (the attempt about
// to start answers them) and keeps a stop or kill for it.
func (s *supervisor) drainRequests() {
	for {
		select {
		case op, ok := <-s.requests:
			if !ok {
				s.requests = nil
				return
			}
			if op != runctl.OpRestart {
				s.pending = op
			}
		default:
			return
		}
	}
}

// waitCopies waits for the output copiers; pipes close once every process of
// the job is gone, which the shim guarantees.
func (a *running) waitCopies() {
	done := make(chan struct{})
	go func() { a.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		a.s.o.Logger.Warn("output pipes still open 10s after the job ended")
	}
}

// check applies the monitor's time-based rules (unsaved work, stall) and
// reports whether the job stalled; it collects stacks first.
func (a *running) check(ctx context.Context, now time.Time) bool {
	o := a.s.o
	a.mu.Lock()
	a.mon.Output(a.lastOutput)
	a.mu.Unlock()
	if o.Probe != nil {
		a.mon.Progress(o.Probe.Progress())
		if t, ok := o.Probe.LastCheckpoint(); ok {
			a.mon.Checkpoint(t)
		}
	}
	stalled := false
	for _, e := range a.mon.Check(now, a.n) {
		if e.Kind == timeline.KindStalled {
			if a.stalled || a.interrupted || a.restarting {
				continue
			}
			a.stalled, a.stallDesc, stalled = true, e.Message, true
			e.Message = "the job stalled: " + e.Message
		}
		a.emit(ctx, []timeline.Event{e})
	}
	if stalled {
		a.stacks = a.collectStacks()
	}
	return stalled
}

// StackSignal asks the probe inside Python processes to dump their stacks.
const StackSignal = syscall.SIGUSR2

// collectStacks asks probed Python processes for their stacks (the probe
// registers faulthandler on StackSignal and writes
// stacks-<attempt>-<pid>.txt into the run directory) and reads what arrives
// within two seconds.
func (a *running) collectStacks() []string {
	o := a.s.o
	// Only the probed Python processes take StackSignal; any other process
	// would die of it.
	var pids []int
	if o.Probe != nil {
		pids = o.Probe.PIDs()
	}
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, StackSignal)
	}
	deadline := time.Now().Add(2 * time.Second)
	pattern := filepath.Join(o.RunDir, fmt.Sprintf("stacks-%d-*.txt", a.n))
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(pattern)
		if len(files) >= len(pids) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the last writer finish
	files, _ := filepath.Glob(pattern)
	var out []string
	a.stackFiles = map[int]string{}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			out = append(out, fmt.Sprintf("Python stacks (%s):\n%s", filepath.Base(f), strings.TrimSpace(string(b))))
			var att, pid int
			if _, err := fmt.Sscanf(filepath.Base(f), "stacks-%d-%d.txt", &att, &pid); err == nil {
				a.stackFiles[pid] = f
			}
		}
	}
	return out
}

// input gathers the evidence for diagnose once the attempt ended.
func (a *running) input() diagnose.Input {
	// a stop that comes while a restart is under way wins
	in := diagnose.Input{Interrupted: a.interrupted && !a.stalled, HangUp: a.hangUp, Restarted: a.restarting && !a.interrupted && !a.stalled, Stalled: a.stalled, StallDesc: a.stallDesc, Stacks: a.stacks}
	if in.Interrupted {
		in.Stop = a.stopInput()
	}
	if a.haveFinal {
		in.ExitCode = a.final.ExitCode
		in.Signal = syscall.Signal(a.final.Signal)
	} else {
		in.ExitCode = 1
		in.Signal = syscall.SIGKILL
	}
	end := a.s.o.Now()
	var ownPeak uint64
	if a.cgDir != "" {
		if m, err := cgroup.ReadMemory(a.cgDir, a.cgVersion); err == nil {
			if m.OOMKills > a.oomStart {
				in.OOMKills = int(m.OOMKills - a.oomStart)
				a.mem.CgroupOOMKills = m.OOMKills - a.oomStart
			}
			if a.group != nil {
				ownPeak = m.Peak
			}
		}
	}
	a.finishMemory(ownPeak)
	if in.OOMKills == 0 && (in.Signal == syscall.SIGKILL || a.final.ExitCode != 0) {
		for _, l := range kernelOOM(a.seen, a.startedUptime) {
			in.KernelOOM = append(in.KernelOOM, labelKernelOOM(l))
		}
	}
	if in.OOMKills > 0 || len(in.KernelOOM) > 0 {
		if e := a.lastSampleEvidence(end); e != "" {
			in.KernelOOM = append(in.KernelOOM, e)
		}
	}
	in.PeakRSS, in.PeakWhat = a.mem.PeakRSS, a.mem.PeakWhat()
	in.Limit, in.LimitSource, in.LimitPeak = a.mem.Limit, a.mem.LimitSource, a.mem.LimitPeak
	a.s.o.Store.UpdatePeaks(context.Background(), a.s.o.RunID, a.mem.PeakRSS, a.mem.PeakGPU)
	return in
}

// sample reads the job's process tree through the sampler (host memory of
// every process, the job's own cgroup, the limit in force, GPU memory from
// the sampler's shared process list) and records it.
func (a *running) sample(ctx context.Context) {
	o := a.s.o
	if a.job == nil {
		return
	}
	x, info, err := a.job.Read(ctx)
	if err != nil {
		return
	}
	x.Attempt = a.n
	now := x.T
	a.see(&info)
	a.mu.Lock()
	for _, pid := range info.PIDs {
		a.seen[pid] = true
	}
	if x.CPUTicks != a.lastCPU {
		a.lastCPU, a.lastCPUTime = x.CPUTicks, now
	}
	a.mu.Unlock()
	a.record(&x, &info)
	a.cells.sample(now, x.RSS)
	if o.Probe != nil {
		a.probeEvents(ctx)
	}
	a.analyse(ctx, now, x.RSS, &x)
	a.mem.Samples++
	if keepSample(a.mem.Samples) {
		if err := o.Store.AddSample(context.WithoutCancel(ctx), o.RunID, &x); err != nil {
			o.Logger.Warn("store sample", "err", err)
		}
		o.Store.UpdatePeaks(context.WithoutCancel(ctx), o.RunID, a.mem.PeakRSS, a.mem.PeakGPU)
	}
}

// keepSample downsamples long runs: every sample for the first 3600, then
// every 10th up to 36000, then every 60th.
func keepSample(n int) bool {
	switch {
	case n <= 3600:
		return true
	case n <= 36000:
		return n%10 == 0
	}
	return n%60 == 0
}

// blockingPipe is os.Pipe with a read end in blocking mode: the copier's
// goroutine then sleeps in read(2) until output comes, as tee does, rather
// than going through Go's poller (EAGAIN, epoll_wait, a wake-up, read again)
// for every chunk a job writes.
func blockingPipe(name string) (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), name), os.NewFile(uintptr(p[1]), name), nil
}
