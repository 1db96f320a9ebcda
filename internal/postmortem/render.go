package postmortem

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/units"
)

// RenderShort writes the post-mortem `vramguard run` prints when an attempt
// ends: one line for a success, else reason, evidence and advice.
func RenderShort(w io.Writer, pm *Postmortem) {
	if pm.Reason == diagnose.Success && len(pm.Warnings) > 0 {
		fmt.Fprintf(w, "vramguard: run %s exited 0 after %s%s, but %s\n", pm.RunID, FormatSeconds(pm.DurationS), memSuffix(pm), strings.TrimPrefix(pm.Summary, "the job exited 0, but "))
		for _, s := range pm.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", s)
		}
		for _, e := range pm.Evidence {
			fmt.Fprintf(w, "  • %s\n", e)
		}
		for _, a := range pm.Advice {
			fmt.Fprintf(w, "  → %s\n", a)
		}
		fmt.Fprintf(w, "more:     vramguard explain %s    vramguard logs %s\n", pm.RunID, pm.RunID)
		return
	}
	if pm.Reason == diagnose.Success {
		fmt.Fprintf(w, "vramguard: run %s finished successfully after %s%s\n", pm.RunID, FormatSeconds(pm.DurationS), memSuffix(pm))
		if len(pm.Adaptations) > 0 && pm.Settings != nil {
			fmt.Fprintf(w, "vramguard: the settings that fit: %s, after %s:\n", pm.Settings, units.Plural(len(pm.Adaptations), "adaptation"))
			for _, st := range pm.Adaptations {
				fmt.Fprintf(w, "  • %s\n", st)
			}
		}
		return
	}
	fmt.Fprintf(w, "\n── vramguard post-mortem: run %s", pm.RunID)
	if pm.Name != "" {
		fmt.Fprintf(w, " (%s)", pm.Name)
	}
	fmt.Fprintf(w, ", attempt %d ──\n", pm.Attempt)
	fmt.Fprintf(w, "reason:   %s — %s\n", pm.Reason, pm.Summary)
	fmt.Fprintf(w, "ran for:  %s%s, exit status %d\n", FormatSeconds(pm.DurationS), memSuffix(pm), pm.ExitCode)
	if len(pm.Evidence) > 0 {
		fmt.Fprintln(w, "evidence:")
		for _, e := range pm.Evidence {
			fmt.Fprintf(w, "  • %s\n", strings.ReplaceAll(e, "\n", "\n    "))
		}
	}
	if pm.Resume != nil && pm.Resume.Problem == "" {
		for _, sk := range pm.Resume.Skipped {
			fmt.Fprintf(w, "  • resume skipped %s: %s\n", sk.Path, sk.Reason)
		}
	}
	if len(pm.Advice) > 0 {
		fmt.Fprintln(w, "what to change:")
		for _, a := range pm.Advice {
			fmt.Fprintf(w, "  • %s\n", a)
		}
	}
	if len(pm.Adaptations) > 0 {
		fmt.Fprintln(w, "adapted:")
		for _, st := range pm.Adaptations {
			fmt.Fprintf(w, "  • %s\n", st)
		}
	}
	if pm.RestartDecision != "" {
		fmt.Fprintf(w, "restart:  %s\n", pm.RestartDecision)
	}
	fmt.Fprintf(w, "more:     vramguard explain %s    vramguard logs %s\n", pm.RunID, pm.RunID)
}

// memSuffix names the peak the post-mortem leads with.
func memSuffix(pm *Postmortem) string {
	if pm.Memory.PeakRSS == 0 {
		return ""
	}
	s := ", peak host memory " + units.FormatBytes(pm.Memory.PeakRSS)
	if w := pm.Memory.PeakWhat(); w != "" {
		s += " (" + w + ")"
	}
	return s
}

// Render writes the document `vramguard explain` prints.
func Render(w io.Writer, d *Document) {
	fmt.Fprintf(w, "run       %s", d.RunID)
	if d.Name != "" {
		fmt.Fprintf(w, " (%s)", d.Name)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "command   %s\n", strings.Join(d.Command, " "))
	fmt.Fprintf(w, "status    %s\n", d.Status)
	if d.Reason != "" {
		fmt.Fprintf(w, "reason    %s — %s\n", d.Reason, d.Summary)
	} else {
		fmt.Fprintf(w, "reason    (none yet) %s\n", d.Summary)
	}
	if d.Ended {
		fmt.Fprintf(w, "exit      %d", d.ExitCode)
		if d.Signal != nil && *d.Signal != "" {
			fmt.Fprintf(w, " (%s)", *d.Signal)
		}
		fmt.Fprintln(w)
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		for _, it := range items {
			fmt.Fprintf(w, "  • %s\n", strings.ReplaceAll(it, "\n", "\n    "))
		}
	}
	list("warnings", d.Warnings)
	list("evidence", d.Evidence)
	if oom := d.OOM; oom != nil {
		title := map[string]string{"hip": "ROCm (HIP)", "mps": "Apple MPS", "xpu": "Intel XPU"}[oom.Backend]
		if title == "" {
			title = "CUDA"
		}
		fmt.Fprintf(w, "\n%s OOM numbers\n", title)
		for _, f := range []struct {
			name string
			v    *uint64
		}{{"tried to allocate", oom.TriedBytes}, {"GPU total", oom.TotalBytes}, {"GPU free", oom.FreeBytes},
			{"allocated by PyTorch", oom.AllocatedBytes}, {"reserved, unallocated", oom.ReservedUnallocatedBytes},
			{"other allocations", oom.OtherBytes}, {"allowed", oom.AllowedBytes}} {
			if f.v != nil {
				fmt.Fprintf(w, "  %-23s %s\n", f.name, units.FormatBytes(*f.v))
			}
		}
	}
	renderRanks(w, d.Ranks, d.RootCause)
	list("what to change", d.Advice)
	if len(d.Adaptations) > 0 {
		fmt.Fprintln(w, "\nadaptations (--adapt)")
		for _, st := range d.Adaptations {
			fmt.Fprintf(w, "  • %s — %s\n", st, st.Why)
		}
		if d.Settings != nil {
			what := "last settings"
			if d.Reason == diagnose.Success {
				what = "settings that fit"
			}
			fmt.Fprintf(w, "  %s: %s\n", what, d.Settings)
		}
	}
	if d.RestartDecision != "" {
		fmt.Fprintf(w, "\nrestart   %s\n", d.RestartDecision)
	}
	if len(d.AttemptsDetail) > 0 {
		fmt.Fprintln(w, "\nattempts")
		for _, a := range d.AttemptsDetail {
			ec := "-"
			if a.ExitCode != nil {
				ec = fmt.Sprint(*a.ExitCode)
			}
			reason := a.Reason
			if reason == "" {
				reason = "-"
			}
			line := fmt.Sprintf("  #%d  %-22s exit %-4s %8s", a.N, reason, ec, time.Duration(a.DurationS*float64(time.Second)).Round(100*time.Millisecond))
			if a.Settings != nil {
				line += "  " + a.Settings.String()
			}
			if a.ResumeFrom != "" {
				line += "  resumed from " + a.ResumeFrom
			}
			fmt.Fprintln(w, line)
		}
	}
	if d.Monitor != nil {
		renderMonitor(w, d.Monitor)
	}
	renderTimeline(w, &d.Timeline, &d.Memory)
	for _, a := range d.AttemptsDetail {
		if a.Kernel != nil && (a.Kernel.CellsTotal > 0 || a.N == d.Attempt) {
			renderKernel(w, a.Kernel, a.N)
		}
	}
	if d.Probe != nil {
		renderProbe(w, d.Probe, d.EndedAt, d.AllocationSites, d.AllocationSitesError)
	}
}

// renderRanks writes a distributed job's ranks: one line each (exit,
// reason, optimizer steps, peaks, last line), the root cause marked, then
// each failed rank's evidence.
func renderRanks(w io.Writer, rs []ranks.Rank, root *ranks.RootCause) {
	if len(rs) == 0 {
		return
	}
	title := "ranks (" + units.Plural(len(rs), "rank")
	if root != nil {
		title += fmt.Sprintf("; rank %d first", root.Rank)
		if root.Reason == diagnose.Stalled {
			title = strings.TrimSuffix(title, " first") + " stopped first"
		} else {
			title += " to fail"
		}
	}
	fmt.Fprintf(w, "\n%s)\n", title)
	fmt.Fprintf(w, "  %-5s %-8s %-10s %-15s %-16s %6s %10s %10s  %s\n", "RANK", "PID", "NODE", "EXIT", "REASON", "STEPS", "PEAK HOST", "PEAK GPU", "LAST LINE")
	for _, r := range rs {
		rank := fmt.Sprint(r.Rank)
		if root != nil && root.Rank == r.Rank {
			rank += "*"
		}
		c := CellsOf(r)
		fmt.Fprintf(w, "  %-5s %-8s %-10s %-15s %-16s %6s %10s %10s  %s\n", rank, c.PID, c.Node, c.Exit, c.Reason, c.Steps, c.PeakHost, c.PeakGPU, c.LastLine)
	}
	if root != nil {
		fmt.Fprintf(w, "  * %s\n", root.How)
	}
	for _, r := range rs {
		if len(r.Evidence) == 0 || r.Reason == diagnose.Success {
			continue
		}
		what := r.Reason
		if r.Collateral {
			what += ", collateral"
		}
		fmt.Fprintf(w, "  rank %d (%s):\n", r.Rank, what)
		for _, e := range r.Evidence {
			fmt.Fprintf(w, "    • %s\n", strings.ReplaceAll(e, "\n", "\n      "))
		}
		if r.StacksPath != "" {
			fmt.Fprintf(w, "    • Python stacks: %s\n", r.StacksPath)
		}
	}
}

func bytesOrDash(v *uint64) string {
	if v == nil {
		return "-"
	}
	return units.FormatBytes(*v)
}

func truncRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func renderMonitor(w io.Writer, m *monitor.Summary) {
	fmt.Fprintln(w, "\nmonitor")
	v := m.Verdict
	if m.Series != "" {
		v += " (" + seriesName(m.Series) + ")"
	}
	fmt.Fprintf(w, "  verdict   %s, over %s\n", v, units.Plural(m.Samples, "sample"))
	if l := m.Leak; l != nil {
		fmt.Fprintf(w, "  leak      first seen %s (t=%.0fs): +%s/s of %s since t=%.0fs\n", l.DetectedAt.Local().Format("15:04:05"),
			l.DetectedS, units.FormatBytes(l.LeakRate), seriesName(l.Series), l.LeakStartS)
		if l.OOMETA != nil {
			fmt.Fprintf(w, "            forecast then: out of memory in about %s\n", analyze.FormatDuration(*l.OOMETA))
		}
	}
	if f := m.Forecast; f != nil && f.OOMETA != nil {
		fmt.Fprintf(w, "  forecast  at %s (t=%.0fs): out of memory in about %s\n", f.DetectedAt.Local().Format("15:04:05"),
			f.DetectedS, analyze.FormatDuration(*f.OOMETA))
	}
}

func seriesName(s string) string {
	switch s {
	case "rss":
		return "host memory"
	case "allocated":
		return "PyTorch allocated"
	case "reserved":
		return "PyTorch reserved"
	case "used":
		return "GPU memory (NVML)"
	}
	return s
}

func renderTimeline(w io.Writer, tl *TimelineSummary, mem *MemStats) {
	if tl.Samples == 0 {
		return
	}
	fmt.Fprintln(w, "\nmemory timeline")
	fmt.Fprintf(w, "  host RSS  %s  first %s, peak %s, last %s (summed over the job's processes; %s, up to %s)\n",
		tl.Sparkline, units.FormatBytes(tl.RSSFirst), units.FormatBytes(tl.RSSPeak), units.FormatBytes(tl.RSSLast),
		units.Plural(tl.Samples, "sample"), units.Plural(tl.MaxProcesses, "process"))
	if tl.PSSPeak != nil {
		fmt.Fprintf(w, "  host PSS  peak %s (shared pages split between the processes sharing them)\n", units.FormatBytes(*tl.PSSPeak))
	}
	if tl.CgroupPeak != nil {
		s := "  cgroup    peak " + units.FormatBytes(*tl.CgroupPeak)
		if tl.CgroupLimit != nil {
			s += " of its " + units.FormatBytes(*tl.CgroupLimit) + " limit"
		}
		fmt.Fprintln(w, s+" (the job's own cgroup, page cache included)")
	}
	if tl.GPUPeak != nil {
		fmt.Fprintf(w, "  GPU       peak %s (NVML, the job's processes)\n", units.FormatBytes(*tl.GPUPeak))
	}
	if tl.AllocPeak != nil {
		s := "  PyTorch   peak allocated " + units.FormatBytes(*tl.AllocPeak)
		if tl.ReservedPeak != nil {
			s += ", reserved " + units.FormatBytes(*tl.ReservedPeak)
		}
		fmt.Fprintln(w, s+" (the probe, summed over processes)")
	}
}

func renderProbe(w io.Writer, p *Probe, end time.Time, sites []AllocSite, sitesErr string) {
	fmt.Fprintln(w, "\nprobe (inside PyTorch)")
	fmt.Fprintf(w, "  steps     %d optimizer steps", p.OptimizerSteps)
	if p.UserSteps > 0 {
		fmt.Fprintf(w, ", %d counted by the job", p.UserSteps)
	}
	fmt.Fprintf(w, " (%s from %s)\n", units.Plural(p.Samples, "sample"), units.Plural(len(p.PIDs), "process"))
	if p.PeakAllocatedBytes != nil || p.PeakReservedBytes != nil {
		s := "  peaks    "
		if p.PeakAllocatedBytes != nil {
			s += " allocated " + units.FormatBytes(*p.PeakAllocatedBytes)
		}
		if p.PeakReservedBytes != nil {
			s += ", reserved " + units.FormatBytes(*p.PeakReservedBytes)
		}
		fmt.Fprintln(w, s+" (one device of one process)")
	}
	if p.PeakRSSBytes > 0 {
		fmt.Fprintf(w, "  host      largest RSS of one process %s\n", units.FormatBytes(p.PeakRSSBytes))
	}
	if p.NumAllocRetries > 0 || p.NumOOMs > 0 {
		fmt.Fprintf(w, "  allocator %d retries, %d OOMs\n", p.NumAllocRetries, p.NumOOMs)
	}
	if n := len(p.Checkpoints); n > 0 {
		fmt.Fprintf(w, "  checkpoints (%d)\n", n)
		shown := p.Checkpoints
		if len(shown) > 10 {
			fmt.Fprintf(w, "    … %d earlier\n", len(shown)-10)
			shown = shown[len(shown)-10:]
		}
		for _, c := range shown {
			what := units.FormatBytes(c.Bytes) + " in " + FormatSeconds(c.Seconds)
			if c.Error != "" {
				what = "failed: " + c.Error
			}
			atomic := ""
			if c.Atomic {
				atomic = ", atomic"
			}
			fmt.Fprintf(w, "    %s  %s  %s (step %d%s)\n", c.T.Local().Format("15:04:05"), filepath.Base(c.Path), what, c.Steps, atomic)
			if l := c.AfterWarning(end); l != "" {
				fmt.Fprintf(w, "              %s\n", l)
			}
		}
	}
	if o := p.OOM; o != nil {
		s := fmt.Sprintf("  CUDA OOM  %s in pid %d (%s)", o.T.Local().Format("15:04:05"), o.PID, o.Source)
		if o.AllocBytes != nil {
			s += ", tried to allocate " + units.FormatBytes(*o.AllocBytes)
		}
		if o.Count > 1 {
			s += fmt.Sprintf(", %d in all", o.Count)
		}
		fmt.Fprintln(w, s)
		if o.SnapshotPath != "" {
			fmt.Fprintf(w, "            snapshot %s\n", o.SnapshotPath)
		}
	}
	if len(sites) > 0 {
		fmt.Fprintln(w, "  largest allocation sites at the OOM")
		for _, s := range sites {
			fmt.Fprintf(w, "    %10s  %s:%d %s (%d blocks)\n", units.FormatBytes(s.Bytes), s.File, s.Line, s.Function, s.Blocks)
		}
	} else if sitesErr != "" {
		fmt.Fprintf(w, "  allocation sites unreadable: %s\n", sitesErr)
	}
	for _, e := range p.Errors {
		fmt.Fprintf(w, "  probe error: %s\n", e)
	}
}

// FormatSeconds formats a duration in seconds for people.
func FormatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// Sparkline draws vals resampled to width cells.
func Sparkline(vals []float64, width int) string {
	if len(vals) == 0 {
		return ""
	}
	bars := []rune("▁▂▃▄▅▆▇█")
	lo, hi := vals[0], vals[0]
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	n := min(width, len(vals))
	var b strings.Builder
	for i := 0; i < n; i++ {
		a, z := i*len(vals)/n, (i+1)*len(vals)/n
		m := vals[a]
		for _, v := range vals[a:z] {
			m = max(m, v)
		}
		k := 0
		if hi > lo {
			k = int((m - lo) / (hi - lo) * float64(len(bars)-1))
		}
		b.WriteRune(bars[k])
	}
	return b.String()
}
