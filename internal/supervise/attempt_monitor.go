// What an attempt watches of its job: each sample read through the sampler and
// judged by the monitor, the time rules (unsaved work, stall) and the Python
// stacks collected when the job stalls.

package supervise

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

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
// within stacksWait.
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
	pattern := filepath.Join(o.RunDir, fmt.Sprintf("stacks-%d-*.txt", a.n))
	out, files := waitStacks(pattern, len(pids), stacksWait)
	a.stackFiles = files
	return out
}

// stacksWait bounds how long a stalled job's processes have to write their
// stacks: a stalled job waits for nothing else, and on a loaded machine a
// process blocked in C takes a while to be scheduled for its signal.
const stacksWait = 5 * time.Second

// waitStacks waits until n files matching pattern hold stacks whose size
// held for one look (faulthandler writes a dump in many writes), or until
// wait has passed, and returns the stacks found, each headed by its file's
// name, and the files by pid. The probe opens each file when it starts, so
// a file that is there but empty has not been written yet.
func waitStacks(pattern string, n int, wait time.Duration) ([]string, map[int]string) {
	deadline := time.Now().Add(wait)
	sizes := map[string]int64{}
	for {
		files, _ := filepath.Glob(pattern)
		steady := 0
		for _, f := range files {
			st, err := os.Stat(f)
			if err != nil || st.Size() == 0 {
				continue
			}
			if sizes[f] == st.Size() {
				steady++
			}
			sizes[f] = st.Size()
		}
		if steady >= n || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	files, _ := filepath.Glob(pattern)
	var out []string
	byPID := map[int]string{}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			out = append(out, fmt.Sprintf("Python stacks (%s):\n%s", filepath.Base(f), strings.TrimSpace(string(b))))
			var att, pid int
			if _, err := fmt.Sscanf(filepath.Base(f), "stacks-%d-%d.txt", &att, &pid); err == nil {
				byPID[pid] = f
			}
		}
	}
	return out, byPID
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
