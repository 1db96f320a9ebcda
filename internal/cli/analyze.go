package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/analyze/runtrace"
	"github.com/vramguard/vramguard/internal/analyze/trace"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/units"
)

type analyzeOptions struct {
	Target  string
	JSON    bool
	Score   []string
	Attempt int
}

// NewCmdAnalyze builds `vramguard analyze`.
func NewCmdAnalyze(f *Factory) *cobra.Command {
	opts := &analyzeOptions{}
	cmd := &cobra.Command{
		Use:   "analyze TRACE.csv|RUN [--attempt N]",
		Short: "Tell a memory leak from the allocator's cache and forecast the OOM",
		Long: `Analyze a job's memory timeline: is it leaking (tensors kept alive step after step),
is the caching allocator growing (fragmentation), or is it stable? When memory is
rising, when will the device run out?

The timeline is fed sample by sample to the same online detector that watches live
runs, so detected_at_t is when a live run would have been warned.

TRACE.csv has the header t,allocated,reserved,used,total (seconds; bytes of
torch.cuda.memory_allocated(), memory_reserved(), NVML used memory, device total);
allocated and reserved may be empty when only NVML watched. Optional extra columns:
rss, pss, limit, cgroup_usage, step, inactive_split, alloc_retries (rss and limit
feed the host-memory leak test; ` + "`vramguard runs export`" + ` writes them all).

RUN is a recorded run's id, id prefix or name, or "last": its last attempt's
recorded samples (--attempt N: attempt N's), time counted from the attempt's start,
go through the same detector with the same settings as the live monitor, so the
verdict is the one the monitor reached at the last sample (past an attempt's first
3600 samples the store keeps every 10th: see docs/ANALYSIS.md). An attempt without
samples exits 1.`,
		Example: `  # analyze a trace
  vramguard analyze trace.csv

  # the same, as one JSON object for scripts
  vramguard analyze trace.csv --json | jq .verdict

  # the newest recorded run (its last attempt)
  vramguard analyze last

  # its first attempt, and the same timeline as a CSV to keep or share
  vramguard analyze last --attempt 1
  vramguard runs export last --attempt 1 -o run.csv && vramguard analyze run.csv`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(opts.Score) > 0 {
				if len(args) > 0 {
					return Usagef("give either TRACE.csv|RUN or --score DIR, not both")
				}
				return nil
			}
			if len(args) != 1 {
				return Usagef("want one TRACE.csv or RUN, got %d arguments\nRun 'vramguard analyze --help' for usage.", len(args))
			}
			if opts.Attempt < 0 {
				return Usagef("--attempt %d: want an attempt number (1, 2, ...)", opts.Attempt)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(opts.Score) > 0 {
				return analyzeScore(f, opts)
			}
			opts.Target = args[0]
			return analyzeTarget(cmd.Context(), f, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print one JSON object")
	// --score DIR runs the detector over a labelled directory (a labels.json
	// beside the CSVs, as in shared/traces), prints precision, recall, false
	// alarms, detection delay and OOM-forecast error per family, and exits 1
	// when the acceptance thresholds are missed (docs/ANALYSIS.md). It is for
	// vramguard's developers, so --help leaves it out.
	cmd.Flags().StringArrayVar(&opts.Score, "score", nil, "score the detector over a labelled directory (repeatable)")
	_ = cmd.Flags().MarkHidden("score")
	cmd.Flags().IntVar(&opts.Attempt, "attempt", 0, "with RUN: analyze attempt N (default: the last)")
	return cmd
}

func analyzeTarget(ctx context.Context, f *Factory, opts *analyzeOptions) error {
	samples, isFile, err := loadTrace(opts.Target)
	if err != nil {
		return err
	}
	if !isFile {
		return analyzeRecorded(ctx, f, opts)
	}
	if opts.Attempt != 0 {
		return Usagef("--attempt is for a recorded RUN, not a file")
	}
	rep := trace.Analyze(samples, analyze.DefaultConfig())
	if opts.JSON {
		return f.WriteJSON(analyzeJSON(rep))
	}
	writeAnalyzeHuman(f.IO.Out, opts.Target, rep)
	return nil
}

// analyzeRecorded replays a recorded run's attempt through the detector, as
// the live monitor saw it.
func analyzeRecorded(ctx context.Context, f *Factory, opts *analyzeOptions) error {
	st, r, err := f.openRun(ctx, opts.Target)
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) && ee.Code == ExitUsage { // no such run, or no store to look in
			return Usagef("%s: no such file; %v", opts.Target, ee.Err)
		}
		return err
	}
	defer st.Close()
	rec, err := loadAttempt(ctx, st, r, opts.Attempt)
	if err != nil {
		return err
	}
	if len(rec.Samples) == 0 {
		return Failf("run %s attempt %d has no memory samples to analyze (it ended before the first sample, or has just started)", r.ID, rec.Attempt.N)
	}
	rep := runtrace.Replay(rec.Samples, rec.Attempt.StartedAt, analyze.DefaultConfig())
	// the live monitor's findings, replayed: when the leak was first seen
	// and its start as the run's alert gave them
	mon := monitor.Replay(monitor.Config{}, rec.Attempt.StartedAt, rec.Samples)
	if opts.JSON {
		o := analyzeJSON(rep)
		o.RunID, o.Attempt, o.Monitor = r.ID, rec.Attempt.N, &mon
		return f.WriteJSON(o)
	}
	name := r.ID
	if r.Name != "" {
		name += " (" + r.Name + ")"
	}
	writeAnalyzeHuman(f.IO.Out, fmt.Sprintf("run %s attempt %d", name, rec.Attempt.N), rep)
	if l := mon.Leak; l != nil {
		fmt.Fprintf(f.IO.Out, "  monitor   the live monitor raised it at t=%.0fs (leak since t=%.0fs)\n", l.DetectedS, l.LeakStartS)
	}
	if fc := mon.Forecast; fc != nil && fc.OOMETA != nil {
		fmt.Fprintf(f.IO.Out, "  monitor   the live monitor forecast at t=%.0fs: %s\n", fc.DetectedS, fc.Message)
	}
	fmt.Fprintf(f.IO.Out, "  (t counts seconds from the attempt's start, %s)\n", rec.Attempt.StartedAt.Local().Format("2006-01-02 15:04:05"))
	return nil
}

// loadTrace reads target when it is a file; isFile is false when target
// names no file and may name a recorded run.
func loadTrace(target string) (samples []analyze.Sample, isFile bool, err error) {
	st, statErr := os.Stat(target)
	switch {
	case statErr == nil && st.IsDir():
		return nil, true, Usagef("%s is a directory: want a TRACE.csv (or --score %s for a labelled directory)", target, target)
	case statErr == nil:
		s, err := trace.ReadFile(target)
		if err != nil {
			return nil, true, Usagef("%v", err)
		}
		if len(s) == 0 {
			return nil, true, Usagef("%s: no samples after the header", target)
		}
		return s, true, nil
	case strings.HasSuffix(strings.ToLower(target), ".csv") || strings.ContainsRune(target, os.PathSeparator):
		return nil, true, Usagef("%s: no such file", target)
	}
	return nil, false, nil
}

// analyzeOutput is the --json object; absent numbers are null.
type analyzeOutput struct {
	Verdict         string         `json:"verdict"`
	LeakRate        *float64       `json:"leak_rate_bytes_per_s"`
	LeakRatePerStep *float64       `json:"leak_rate_bytes_per_step"`
	LeakStartT      *float64       `json:"leak_start_t"`
	DetectedAtT     *float64       `json:"detected_at_t"`
	OOMETA          *float64       `json:"oom_eta_s"`
	OOMETAInterval  []any          `json:"oom_eta_interval_s"`
	Confidence      float64        `json:"confidence"`
	Series          string         `json:"series,omitempty"`
	Ambiguous       bool           `json:"ambiguous"`
	Evidence        []string       `json:"evidence"`
	Advice          []string       `json:"advice"`
	Samples         int            `json:"samples"`
	HostLeak        *analyzeOutput `json:"host_leak,omitempty"`
	// Runway is the forecast from a sustained rise of host memory near its
	// limit at the last sample, a claim of its own whatever the verdict.
	Runway *runwayOutput `json:"runway,omitempty"`
	// a recorded run's id and attempt (analyze RUN)
	RunID   string `json:"run_id,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Monitor is the live monitor's summary replayed over the recorded
	// attempt (analyze RUN): its leak is the run's leak alert.
	Monitor *monitor.Summary `json:"monitor,omitempty"`
}

type runwayOutput struct {
	Series         string   `json:"series"`
	Rate           *float64 `json:"rate_bytes_per_s"`
	SinceT         *float64 `json:"since_t"`
	Level          *float64 `json:"level_bytes"`
	Limit          *float64 `json:"limit_bytes"`
	OOMETA         *float64 `json:"oom_eta_s"`
	OOMETAInterval []any    `json:"oom_eta_interval_s"`
	Evidence       string   `json:"evidence"`
}

func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	r := math.Round(v*1000) / 1000
	return &r
}

func analyzeJSON(r analyze.Report) analyzeOutput {
	o := analyzeOutput{
		Verdict: string(r.Verdict), LeakRate: num(r.LeakRate), LeakRatePerStep: num(r.LeakRatePerStep),
		LeakStartT: num(r.LeakStartT), DetectedAtT: num(r.DetectedAtT), OOMETA: num(r.OOMETA),
		Confidence: r.Confidence, Series: string(r.Series), Ambiguous: r.Ambiguous,
		Evidence: r.Evidence, Advice: r.Advice, Samples: r.Samples,
	}
	o.Evidence = emptyIfNil(o.Evidence)
	o.Advice = emptyIfNil(o.Advice)
	if o.OOMETA != nil {
		o.OOMETAInterval = []any{num(r.OOMETALow), num(r.OOMETAHigh)}
	}
	if r.HostLeak != nil {
		h := analyzeJSON(*r.HostLeak)
		o.HostLeak = &h
	}
	if w := r.Runway; w != nil {
		o.Runway = &runwayOutput{Series: string(w.Series), Rate: num(w.Rate), SinceT: num(w.SinceT), Level: num(w.Level), Limit: num(w.Limit),
			OOMETA: num(w.ETA), OOMETAInterval: []any{num(w.ETALow), num(w.ETAHigh)}, Evidence: w.Evidence}
	}
	return o
}

func writeAnalyzeHuman(w io.Writer, target string, r analyze.Report) {
	head := map[analyze.Verdict]string{
		analyze.VerdictLeak:             "LEAK",
		analyze.VerdictCacheGrowth:      "CACHE GROWTH (not a leak)",
		analyze.VerdictStable:           "stable",
		analyze.VerdictInsufficientData: "not enough data to judge a leak",
	}[r.Verdict]
	if r.Verdict == analyze.VerdictLeak && r.Ambiguous {
		head = "UNBOUNDED GROWTH (leak or fragmentation: only NVML watched)"
	}
	fmt.Fprintf(w, "%s: %s  (confidence %.2f, %s)\n", target, head, r.Confidence, units.Plural(r.Samples, "sample"))
	if !math.IsNaN(r.LeakRate) {
		line := fmt.Sprintf("  rate      %s/s", humanBytes(r.LeakRate))
		if !math.IsNaN(r.LeakRatePerStep) {
			line += fmt.Sprintf(", %s/step", humanBytes(r.LeakRatePerStep))
		}
		fmt.Fprintln(w, line)
		fmt.Fprintf(w, "  since     t=%.0fs (raised at t=%.0fs)\n", r.LeakStartT, r.DetectedAtT)
	}
	if !math.IsNaN(r.OOMETA) {
		fmt.Fprintf(w, "  OOM in    %s after the last sample (%s to %s)\n", humanDur(r.OOMETA), humanDur(r.OOMETALow), humanDur(r.OOMETAHigh))
	}
	for _, e := range r.Evidence {
		fmt.Fprintf(w, "  - %s\n", e)
	}
	for _, a := range r.Advice {
		fmt.Fprintf(w, "  advice: %s\n", a)
	}
	if r.HostLeak != nil {
		fmt.Fprintln(w, "  host memory:")
		for _, e := range r.HostLeak.Evidence {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
	if rw := r.Runway; rw != nil {
		fmt.Fprintf(w, "  forecast  out of memory in about %s after the last sample (%s to %s) at the current rate, %s/s since t=%.0fs (not a leak verdict)\n",
			humanDur(rw.ETA), humanDur(rw.ETALow), humanDur(rw.ETAHigh), humanBytes(rw.Rate), rw.SinceT)
		fmt.Fprintf(w, "  - %s\n", rw.Evidence)
	}
}

// humanBytes and humanDur format as the analysis's own evidence does.
var (
	humanBytes = units.FormatBytes[float64]
	humanDur   = analyze.FormatDuration
)

var errScoreFailed = errors.New("acceptance thresholds missed")
