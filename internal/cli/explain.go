package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/units"
)

// NewCmdExplain builds `vramguard explain`.
func NewCmdExplain(f *Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "explain [RUN]",
		Short: "Explain how a run ended: reason, evidence, what to change, memory timeline",
		Long: `Print the full post-mortem of a run (default: the last one): the reason code
(docs/FAILURES.md), the evidence behind it, the advice, every attempt, and a summary
of the memory timeline. --json prints one object (schema in docs/CLI.md).`,
		Example: `  vramguard explain
  vramguard explain bert --json | jq .oom`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ref := "last"
			if len(args) == 1 {
				ref = args[0]
			}
			st, r, err := f.openRun(ctx, ref)
			if err != nil {
				return err
			}
			defer st.Close()
			doc, err := buildExplain(ctx, st, r, f.Now())
			if err != nil {
				return err
			}
			if asJSON {
				return f.WriteJSON(doc)
			}
			printExplain(f.IO.Out, doc)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// explainDoc is the --json document: the last attempt's post-mortem fields at
// the top level, plus the run's status, every attempt and the timeline.
type explainDoc struct {
	Postmortem map[string]any
	Status     string
	Attempts   []attemptSummary
	Timeline   timeline
	Events     []*store.Event
}

type attemptSummary struct {
	N          int     `json:"n"`
	Reason     string  `json:"reason"`
	ExitCode   *int    `json:"exit_code"`
	DurationS  float64 `json:"duration_s"`
	ResumeFrom string  `json:"resume_from"`
	LogPath    string  `json:"log_path"`
}

type timeline struct {
	Samples      int      `json:"samples"`
	FirstT       *float64 `json:"first_t"`
	LastT        *float64 `json:"last_t"`
	RSSFirst     uint64   `json:"rss_first_bytes"`
	RSSLast      uint64   `json:"rss_last_bytes"`
	RSSPeak      uint64   `json:"rss_peak_bytes"`
	CgroupPeak   *uint64  `json:"cgroup_peak_bytes"`
	CgroupLimit  *uint64  `json:"cgroup_limit_bytes"`
	GPUPeak      *uint64  `json:"gpu_peak_bytes"`
	MaxProcesses int      `json:"max_processes"`
	Sparkline    string   `json:"sparkline"`
}

func (d explainDoc) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range d.Postmortem {
		m[k] = v
	}
	m["status"] = d.Status
	m["attempts_detail"] = d.Attempts
	m["timeline"] = d.Timeline
	m["events"] = d.Events
	for _, k := range []string{"reason", "exit_code", "signal", "evidence", "advice", "probe"} {
		if _, ok := m[k]; !ok {
			m[k] = nil
		}
	}
	return json.Marshal(m)
}

func buildExplain(ctx context.Context, st *store.Store, r *store.Run, now time.Time) (explainDoc, error) {
	doc := explainDoc{Postmortem: map[string]any{}, Status: r.Status}
	attempts, err := st.Attempts(ctx, r.ID)
	if err != nil {
		return doc, err
	}
	pm := r.Postmortem
	if len(pm) == 0 {
		// Still running (or lost before the end): use the last ended attempt.
		for i := len(attempts) - 1; i >= 0; i-- {
			if len(attempts[i].Verdict) > 0 {
				pm = attempts[i].Verdict
				break
			}
		}
	}
	if len(pm) > 0 {
		if err := json.Unmarshal(pm, &doc.Postmortem); err != nil {
			return doc, fmt.Errorf("read post-mortem of %s: %w", r.ID, err)
		}
	} else {
		doc.Postmortem = map[string]any{"reason": nil, "summary": "the run has not ended yet", "evidence": []string{}, "advice": []string{}}
	}
	doc.Postmortem["run_id"] = r.ID
	doc.Postmortem["name"] = r.Name
	doc.Postmortem["command"] = r.Command
	doc.Postmortem["attempts"] = r.Attempts
	if r.Status == store.StatusLost {
		doc.Postmortem["reason"] = "lost"
	}
	for _, a := range attempts {
		s := attemptSummary{N: a.N, Reason: a.Reason, ExitCode: a.ExitCode, ResumeFrom: a.ResumeFrom, LogPath: a.LogPath}
		end := now
		if a.EndedAt != nil {
			end = *a.EndedAt
		}
		s.DurationS = end.Sub(a.StartedAt).Seconds()
		doc.Attempts = append(doc.Attempts, s)
	}
	samples, err := st.Samples(ctx, r.ID)
	if err != nil {
		return doc, err
	}
	doc.Timeline = summarise(samples, r.StartedAt)
	if doc.Events, err = st.Events(ctx, r.ID); err != nil {
		return doc, err
	}
	if doc.Events == nil {
		doc.Events = []*store.Event{}
	}
	return doc, nil
}

func summarise(xs []*store.Sample, t0 time.Time) timeline {
	tl := timeline{Samples: len(xs)}
	if len(xs) == 0 {
		return tl
	}
	first, last := xs[0].T.Sub(t0).Seconds(), xs[len(xs)-1].T.Sub(t0).Seconds()
	tl.FirstT, tl.LastT = &first, &last
	tl.RSSFirst, tl.RSSLast = xs[0].RSS, xs[len(xs)-1].RSS
	vals := make([]float64, len(xs))
	for i, x := range xs {
		vals[i] = float64(x.RSS)
		tl.RSSPeak = max(tl.RSSPeak, x.RSS)
		tl.MaxProcesses = max(tl.MaxProcesses, x.NProcs)
		if x.CgroupUsage != nil && (tl.CgroupPeak == nil || *x.CgroupUsage > *tl.CgroupPeak) {
			v := *x.CgroupUsage
			tl.CgroupPeak = &v
		}
		if x.CgroupLimit != nil {
			v := *x.CgroupLimit
			tl.CgroupLimit = &v
		}
		if x.GPUUsed != nil && (tl.GPUPeak == nil || *x.GPUUsed > *tl.GPUPeak) {
			v := *x.GPUUsed
			tl.GPUPeak = &v
		}
	}
	tl.Sparkline = Sparkline(vals, 40)
	return tl
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

func printExplain(w io.Writer, d explainDoc) {
	pm := d.Postmortem
	str := func(k string) string { s, _ := pm[k].(string); return s }
	fmt.Fprintf(w, "run       %s", str("run_id"))
	if n := str("name"); n != "" {
		fmt.Fprintf(w, " (%s)", n)
	}
	fmt.Fprintln(w)
	if cmd, ok := pm["command"].([]string); ok {
		fmt.Fprintf(w, "command   %s\n", strings.Join(cmd, " "))
	} else if cmd, ok := pm["command"].([]any); ok {
		parts := make([]string, len(cmd))
		for i, c := range cmd {
			parts[i] = fmt.Sprint(c)
		}
		fmt.Fprintf(w, "command   %s\n", strings.Join(parts, " "))
	}
	fmt.Fprintf(w, "status    %s\n", d.Status)
	if r := str("reason"); r != "" {
		fmt.Fprintf(w, "reason    %s — %s\n", r, str("summary"))
	} else {
		fmt.Fprintf(w, "reason    (none yet) %s\n", str("summary"))
	}
	if ec, ok := pm["exit_code"].(float64); ok {
		fmt.Fprintf(w, "exit      %d", int(ec))
		if s := str("signal"); s != "" {
			fmt.Fprintf(w, " (%s)", s)
		}
		fmt.Fprintln(w)
	}
	list := func(title, key string) {
		items, _ := pm[key].([]any)
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		for _, it := range items {
			fmt.Fprintf(w, "  • %s\n", strings.ReplaceAll(fmt.Sprint(it), "\n", "\n    "))
		}
	}
	list("evidence", "evidence")
	if oom, ok := pm["oom"].(map[string]any); ok {
		fmt.Fprintln(w, "\nCUDA OOM numbers")
		for _, k := range []string{"tried_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes"} {
			if v, ok := oom[k].(float64); ok {
				fmt.Fprintf(w, "  %-27s %s\n", k, units.FormatBytes(v))
			}
		}
	}
	list("what to change", "advice")
	if rd := str("restart_decision"); rd != "" {
		fmt.Fprintf(w, "\nrestart   %s\n", rd)
	}
	if len(d.Attempts) > 0 {
		fmt.Fprintln(w, "\nattempts")
		for _, a := range d.Attempts {
			ec := "-"
			if a.ExitCode != nil {
				ec = fmt.Sprint(*a.ExitCode)
			}
			line := fmt.Sprintf("  #%d  %-22s exit %-4s %8s", a.N, dash(a.Reason), ec, time.Duration(a.DurationS*float64(time.Second)).Round(100*time.Millisecond))
			if a.ResumeFrom != "" {
				line += "  resumed from " + a.ResumeFrom
			}
			fmt.Fprintln(w, line)
		}
	}
	tl := d.Timeline
	if tl.Samples > 0 {
		fmt.Fprintln(w, "\nmemory timeline")
		fmt.Fprintf(w, "  host RSS  %s  first %s, peak %s, last %s (%d samples, up to %d processes)\n",
			tl.Sparkline, units.FormatBytes(tl.RSSFirst), units.FormatBytes(tl.RSSPeak), units.FormatBytes(tl.RSSLast), tl.Samples, tl.MaxProcesses)
		if tl.CgroupPeak != nil {
			s := "  cgroup    peak " + units.FormatBytes(*tl.CgroupPeak)
			if tl.CgroupLimit != nil {
				s += " of " + units.FormatBytes(*tl.CgroupLimit) + " limit"
			}
			fmt.Fprintln(w, s)
		}
		if tl.GPUPeak != nil {
			fmt.Fprintf(w, "  GPU       peak %s\n", units.FormatBytes(*tl.GPUPeak))
		}
	}
	if p, ok := pm["probe"].(map[string]any); ok && p != nil {
		b, _ := json.MarshalIndent(p, "  ", "  ")
		fmt.Fprintf(w, "\nprobe\n  %s\n", b)
	}
}
