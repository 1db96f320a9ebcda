package supervise

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
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
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/joblog"
	"github.com/vramguard/vramguard/internal/store"
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
		for i := range argv {
			argv[i] = strings.ReplaceAll(argv[i], "{resume}", pm.Resume.From)
		}
		env = setEnv(env, "VRAMGUARD_RESUME", pm.Resume.From)
		if pm.Resume.From != "" {
			s.notifyf("attempt %d resumes from %s", n, pm.Resume.From)
		}
		for _, sk := range pm.Resume.Skipped {
			s.notifyf("skipped checkpoint %s: %s", sk.Path, sk.Reason)
			s.event(ctx, n, "resume_skipped", sk.Path+": "+sk.Reason, sk)
		}
	}
	for _, h := range o.Hooks {
		env = h.Env(env, n)
	}

	if err := o.Store.StartAttempt(context.WithoutCancel(ctx), &store.Attempt{RunID: o.RunID, N: n, StartedAt: start, LogPath: pm.LogPath, ResumeFrom: resumeFrom(pm)}); err != nil {
		return nil, err
	}
	lw, err := joblog.Create(pm.LogPath, o.Now)
	if err != nil {
		return nil, err
	}
	defer lw.Close()

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
	s.drainRestarts()
	in := diagnose.Input{}
	a := &running{s: s, pm: pm, n: n, lw: lw, group: group, tail: joblog.NewTail(200)}
	if err := a.start(argv, env); err != nil {
		in.StartErr = err
		in.ExitCode = 127
	} else {
		for _, h := range o.Hooks {
			h.Started(n, a.jobPID)
		}
		o.Store.SetAttemptPID(context.WithoutCancel(ctx), o.RunID, n, a.jobPID)
		o.Store.SetJobPID(context.WithoutCancel(ctx), o.RunID, a.jobPID)
		a.watch(ctx)
		in = a.input()
	}
	in.Tail = a.tail.Lines()
	v := diagnose.Classify(in)
	pm.Verdict = v
	exitMsg := fmt.Sprintf("attempt %d ended: %s", n, pm.Reason)
	if pm.Reason == diagnose.Restarted && !s.interrupted {
		// Ended on request so that the next attempt starts at once.
		s.restartNow = true
		pm.RestartDecision = "restarted by request: the next attempt starts at once, whatever --restart says, and does not count against --max-restarts"
		exitMsg += " (restarted by request)"
	}
	pm.EndedAt = o.Now()
	pm.DurationS = pm.EndedAt.Sub(start).Seconds()
	pm.Memory = a.mem
	for _, h := range o.Hooks {
		h.Finish(pm)
	}
	if pm.Resume != nil && len(pm.Resume.Skipped) > 0 {
		for _, sk := range pm.Resume.Skipped {
			pm.Evidence = append(pm.Evidence, fmt.Sprintf("resume: skipped newer checkpoint %s (%s)", sk.Path, sk.Reason))
		}
	}
	b, _ := json.Marshal(pm)
	if err := o.Store.FinishAttempt(context.WithoutCancel(ctx), o.RunID, n, pm.EndedAt, pm.ExitCode, pm.Reason, b); err != nil {
		o.Logger.Warn("store attempt", "err", err)
	}
	s.event(ctx, n, "exit", exitMsg, map[string]any{"reason": pm.Reason, "exit_code": pm.ExitCode, "restarted_by_request": s.restartNow})
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
	best, skipped, err := ckpt.Latest(s.o.ResumeFrom)
	if err != nil {
		s.notifyf("cannot look for checkpoints in %s: %v", s.o.ResumeFrom, err)
		return r
	}
	for _, e := range skipped {
		r.Skipped = append(r.Skipped, SkippedCkpt{Path: e.Path, Reason: e.Reason})
	}
	if best != nil {
		r.From = best.Path
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
	tail  *joblog.Tail

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
	oomStart    uint64
	cgDir       string
	cgVersion   int
	// pathLimit is the tightest memory limit on the job's cgroup path, its
	// own cgroup or an ancestor's (a SLURM step under its job's limit, a
	// limited slice); 0 when none
	pathLimit     uint64
	interrupted   bool
	restarting    bool // ended by a restart request
	stalled       bool
	stallDesc     string
	stacks        []string
	final         statusMsg
	haveFinal     bool
	startedUptime float64
	gpuAt         time.Time
	gpuProcs      []gpu.Process
	live          *live
	unsavedWarned time.Time
}

// analyse feeds the online leak detector and reports its alerts: a line on
// the terminal and an event, once per episode.
func (a *running) analyse(ctx context.Context, now time.Time, rss uint64, x *store.Sample) {
	o := a.s.o
	if a.live == nil {
		a.live = newLive(o.OOMWarning.Seconds())
	}
	s := analyze.NaNSample(now.Sub(a.pm.StartedAt).Seconds())
	s.RSS = float64(rss)
	if a.mem.Limit > 0 {
		s.Limit = float64(a.mem.Limit)
	}
	if x.GPUUsed != nil && *x.GPUUsed > 0 {
		s.Used = float64(*x.GPUUsed)
	}
	for _, h := range o.Hooks {
		if pm, ok := h.(ProbeMemory); ok {
			if al, re, is, rt, ok := pm.ProbeMemory(); ok {
				s.Allocated, s.Reserved, s.InactiveSplit, s.AllocRetries = al, re, is, rt
				v1, v2 := uint64(al), uint64(re)
				x.Allocated, x.Reserved = &v1, &v2
			}
		}
	}
	for _, al := range a.live.observe(s) {
		a.s.notifyf("%s", al.Message)
		a.s.event(ctx, a.n, string(al.Kind), al.Message, map[string]any{
			"verdict": al.Report.Verdict, "series": al.Report.Series, "leak_rate_bytes_per_s": finite(al.Report.LeakRate),
			"oom_eta_s": finite(al.Report.OOMETA), "confidence": al.Report.Confidence, "evidence": al.Report.Evidence})
	}
}

func finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}

// start launches the shim and waits for it to report the job's PID.
func (a *running) start(argv, env []string) error {
	o := a.s.o
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
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
	args := []string{ShimCommand}
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGUSR1}
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
	a.lastOutput = o.Now()
	a.copies.Add(2)
	activity := func(int) {
		a.mu.Lock()
		a.lastOutput = o.Now()
		a.mu.Unlock()
	}
	go func() { defer a.copies.Done(); joblog.Copy(a.lw, 'o', outR, o.Stdout, a.tail, activity); outR.Close() }()
	go func() { defer a.copies.Done(); joblog.Copy(a.lw, 'e', errR, o.Stderr, a.tail, activity); errR.Close() }()

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
	if l, err := o.Cgroup.LimitsOf(a.jobPID); err == nil {
		a.pathLimit = l.MemoryBytes
	}
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
		line, err := a.status.ReadBytes('\n')
		var m statusMsg
		if err == nil && json.Unmarshal(line, &m) == nil {
			finalCh <- m
		}
		close(finalCh)
		a.statusR.Close()
	}()
	a.sample(ctx)
	killAll := func() { _ = syscall.Kill(a.shimPID, syscall.SIGUSR1) }
	for {
		select {
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
			if sig == syscall.SIGHUP && o.Detached {
				continue
			}
			if a.interrupted || a.s.interrupted {
				a.s.notifyf("killing the job")
				killAll()
				continue
			}
			a.interrupted, a.s.interrupted = true, true
			fwd := sig.(syscall.Signal)
			if fwd == syscall.SIGHUP {
				fwd = syscall.SIGTERM
			}
			a.s.notifyf("stopping the job (%s forwarded; again to kill it, or it is killed in %s)", diagnose.SignalName(fwd), o.StopTimeout)
			a.s.event(ctx, a.n, "stop", "stopped by "+diagnose.SignalName(sig.(syscall.Signal)), nil)
			_ = syscall.Kill(a.shimPID, fwd)
			stopTimer = time.After(o.StopTimeout)
		case _, ok := <-a.s.restarts:
			if !ok {
				a.s.restarts = nil
				continue
			}
			switch {
			case a.interrupted || a.s.interrupted:
				a.s.notifyf("restart requested while the job is being stopped; the stop stands")
				continue
			case a.restarting:
				a.s.notifyf("killing the job")
				killAll()
				continue
			}
			a.restarting = true
			a.s.notifyf("restart requested: ending attempt %d (SIGTERM; again to kill it, or it is killed in %s), then attempt %d starts", a.n, o.StopTimeout, a.n+1)
			a.s.event(ctx, a.n, "restart_requested", fmt.Sprintf("restart requested: attempt %d is ended (SIGTERM, SIGKILL after %s) and attempt %d starts", a.n, o.StopTimeout, a.n+1), nil)
			_ = syscall.Kill(a.shimPID, syscall.SIGTERM)
			stopTimer = time.After(o.StopTimeout)
		case <-stopTimer:
			a.s.notifyf("the job did not stop within %s; killing it", o.StopTimeout)
			killAll()
		case <-tick.C:
			a.sample(ctx)
			a.unsavedCheck(ctx, o.Now())
			if a.stallCheck(ctx) {
				killAll()
			}
		}
	}
}

// drainRestarts drops restart requests that are waiting.
func (s *supervisor) drainRestarts() {
	for {
		select {
		case _, ok := <-s.restarts:
			if !ok {
				s.restarts = nil
				return
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

// stallCheck reports whether the job stalled; it collects stacks first.
func (a *running) stallCheck(ctx context.Context) bool {
	o := a.s.o
	if o.StallTimeout <= 0 || a.stalled || a.interrupted || a.restarting {
		return false
	}
	now := o.Now()
	a.mu.Lock()
	last := a.lastOutput
	if a.lastCPUTime.After(last) {
		last = a.lastCPUTime
	}
	a.mu.Unlock()
	for _, h := range o.Hooks {
		if p := h.Progress(); p.After(last) {
			last = p
		}
	}
	idle := now.Sub(last)
	if idle < o.StallTimeout {
		return false
	}
	a.stalled = true
	a.stallDesc = fmt.Sprintf("no output, no CPU time used by any of its processes and no training progress for %s (--stall-timeout %s)", idle.Round(time.Second), o.StallTimeout)
	a.s.notifyf("the job stalled: %s", a.stallDesc)
	a.s.event(ctx, a.n, "stalled", a.stallDesc, nil)
	a.stacks = a.collectStacks()
	return true
}

// StackSignal asks the probe inside Python processes to dump their stacks.
const StackSignal = syscall.SIGUSR2

// StackTargets is implemented by a Hook that knows which processes can take
// StackSignal (the probed Python processes); any other process would die of
// it, so nothing else is signalled.
type StackTargets interface {
	PIDs() []int
}

// collectStacks asks probed Python processes for their stacks (the probe
// registers faulthandler on StackSignal and writes
// stacks-<attempt>-<pid>.txt into the run directory) and reads what arrives
// within two seconds.
func (a *running) collectStacks() []string {
	o := a.s.o
	var pids []int
	for _, h := range o.Hooks {
		if st, ok := h.(StackTargets); ok {
			pids = append(pids, st.PIDs()...)
		}
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
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			out = append(out, fmt.Sprintf("Python stacks (%s):\n%s", filepath.Base(f), strings.TrimSpace(string(b))))
		}
	}
	return out
}

// CheckpointClock is implemented by a Hook that sees checkpoints being saved.
type CheckpointClock interface {
	LastCheckpoint() (time.Time, bool)
}

// unsavedCheck warns, once per checkpoint, when the job has trained for
// longer than UnsavedWarning since its last checkpoint (or its start).
func (a *running) unsavedCheck(ctx context.Context, now time.Time) {
	o := a.s.o
	if o.UnsavedWarning <= 0 {
		return
	}
	since := a.pm.StartedAt
	var progress time.Time
	for _, h := range o.Hooks {
		if c, ok := h.(CheckpointClock); ok {
			if t, ok := c.LastCheckpoint(); ok && t.After(since) {
				since = t
			}
		}
		if p := h.Progress(); p.After(progress) {
			progress = p
		}
	}
	// Only training counts: the job must have made progress after the save.
	if progress.IsZero() || !progress.After(since) || now.Sub(since) < o.UnsavedWarning {
		return
	}
	if a.unsavedWarned.Equal(since) {
		return
	}
	a.unsavedWarned = since
	msg := fmt.Sprintf("%s of training since the last checkpoint (--unsaved-warning %s): a crash now loses it all", now.Sub(since).Round(time.Second), o.UnsavedWarning)
	a.s.notifyf("%s", msg)
	a.s.event(ctx, a.n, "unsaved_work", msg, map[string]any{"since": since, "seconds": now.Sub(since).Seconds()})
}

// input gathers the evidence for diagnose once the attempt ended.
func (a *running) input() diagnose.Input {
	// a stop that comes while a restart is under way wins
	in := diagnose.Input{Interrupted: a.interrupted && !a.stalled, Restarted: a.restarting && !a.interrupted && !a.stalled, Stalled: a.stalled, StallDesc: a.stallDesc, Stacks: a.stacks}
	if a.haveFinal {
		in.ExitCode = a.final.ExitCode
		in.Signal = syscall.Signal(a.final.Signal)
	} else {
		in.ExitCode = 1
		in.Signal = syscall.SIGKILL
	}
	if a.cgDir != "" {
		if m, err := cgroup.ReadMemory(a.cgDir, a.cgVersion); err == nil {
			if m.OOMKills > a.oomStart {
				in.OOMKills = int(m.OOMKills - a.oomStart)
				a.mem.CgroupOOMKills = m.OOMKills - a.oomStart
			}
			if m.Peak > a.mem.PeakCgroup && a.group != nil {
				a.mem.PeakCgroup = m.Peak
			}
		}
	}
	if in.OOMKills == 0 && (in.Signal == syscall.SIGKILL || a.final.ExitCode != 0) {
		in.KernelOOM = kernelOOM(a.seen, a.startedUptime)
	}
	in.PeakRSS = a.mem.PeakRSS
	if a.mem.PeakCgroup > in.PeakRSS {
		in.PeakRSS = a.mem.PeakCgroup
	}
	in.Limit, in.LimitSource = a.mem.Limit, a.mem.LimitSource
	return in
}

// sample reads the job's process tree, its cgroup and its GPU memory.
func (a *running) sample(ctx context.Context) {
	o := a.s.o
	all, err := o.Proc.All()
	if err != nil || a.shimPID == 0 {
		return
	}
	tree := treeBelow(all, a.shimPID)
	var rss, cpu uint64
	type pinfo struct {
		PID  int    `json:"pid"`
		PPID int    `json:"ppid"`
		Comm string `json:"comm"`
		RSS  uint64 `json:"rss_bytes"`
		GPU  uint64 `json:"gpu_bytes,omitempty"`
	}
	procs := make([]pinfo, 0, len(tree))
	inTree := make(map[int]int, len(tree))
	for _, p := range tree {
		if p.State == "Z" {
			continue
		}
		rss += p.RSSBytes
		cpu += p.CPUTicks
		inTree[p.PID] = len(procs)
		procs = append(procs, pinfo{PID: p.PID, PPID: p.PPID, Comm: p.Comm, RSS: p.RSSBytes})
	}
	if len(procs) == 0 {
		return
	}
	now := o.Now()
	x := &store.Sample{Attempt: a.n, T: now, RSS: rss, NProcs: len(procs), CPUTicks: cpu}
	a.mu.Lock()
	for pid := range inTree {
		a.seen[pid] = true
	}
	if cpu != a.lastCPU {
		a.lastCPU, a.lastCPUTime = cpu, now
	}
	if rss > a.mem.PeakRSS {
		a.mem.PeakRSS = rss
	}
	if len(procs) > a.mem.PeakProcs {
		a.mem.PeakProcs = len(procs)
	}
	a.mu.Unlock()
	if a.cgDir != "" {
		if m, err := cgroup.ReadMemory(a.cgDir, a.cgVersion); err == nil {
			u, l := m.Usage, m.Limit
			x.CgroupUsage = &u
			if l > 0 {
				x.CgroupLimit = &l
				a.mem.Limit, a.mem.LimitSource = l, "cgroup"
				if a.group != nil {
					a.mem.LimitSource = "--memory-limit"
				}
			}
			if u > a.mem.PeakCgroup {
				a.mem.PeakCgroup = u
			}
		}
	}
	if p := a.pathLimit; p > 0 && (a.mem.Limit == 0 || p < a.mem.Limit) {
		// an ancestor's limit binds the job tighter than its own cgroup's
		a.mem.Limit, a.mem.LimitSource = p, "cgroup"
	}
	if a.mem.Limit == 0 {
		if mi, err := o.Proc.MemInfo(); err == nil {
			a.mem.Limit, a.mem.LimitSource = mi.Total, "host"
		}
	}
	// NVML's process query is expensive and takes a driver lock: at most
	// once a second, whatever the sample interval.
	if now.Sub(a.gpuAt) >= time.Second {
		a.gpuAt = now
		a.gpuProcs, _ = o.GPU.Processes(ctx)
	}
	if gp := a.gpuProcs; len(gp) > 0 {
		var used uint64
		for _, g := range gp {
			if i, ok := inTree[g.PID]; ok {
				used += g.UsedBytes
				procs[i].GPU += g.UsedBytes
			}
		}
		x.GPUUsed = &used
		if used > a.mem.PeakGPU {
			a.mem.PeakGPU = used
		}
	}
	a.analyse(ctx, now, rss, x)
	a.mem.Samples++
	if keepSample(a.mem.Samples) {
		if len(procs) > 64 {
			procs = procs[:64]
		}
		x.Procs, _ = json.Marshal(procs)
		if err := o.Store.AddSample(context.WithoutCancel(ctx), o.RunID, x); err != nil {
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
