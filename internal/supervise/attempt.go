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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/ckpt"
	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/joblog"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
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
