package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/analyze/trace"
	"github.com/vramguard/vramguard/internal/units"
)

// TimelineSource gives the recorded memory timeline of a run (an id, a name,
// or "last"), oldest sample first. The run store implements it.
type TimelineSource interface {
	Timeline(run string) ([]analyze.Sample, error)
}

// NewTimelineSource opens the recorded runs for `vramguard analyze RUN`. It is
// nil until the run store is wired in; analyze then accepts files only.
var NewTimelineSource func(f *Factory) (TimelineSource, error)

type analyzeOptions struct {
	Target string
	JSON   bool
	Score  []string
}

// NewCmdAnalyze builds `vramguard analyze`.
func NewCmdAnalyze(f *Factory) *cobra.Command {
	opts := &analyzeOptions{}
	cmd := &cobra.Command{
		Use:   "analyze TRACE.csv|RUN",
		Short: "Tell a memory leak from the allocator's cache and forecast the OOM",
		Long: `Analyze a job's memory timeline: is it leaking (tensors kept alive step after step),
is the caching allocator growing (fragmentation), or is it stable? When memory is
rising, when will the device run out?

The timeline is fed sample by sample to the same online detector that watches live
runs, so detected_at_t is when a live run would have been warned.

TRACE.csv has the header t,allocated,reserved,used,total (seconds; bytes of
torch.cuda.memory_allocated(), memory_reserved(), NVML used memory, device total);
allocated and reserved may be empty when only NVML watched. Optional extra columns:
rss, limit, step, inactive_split, alloc_retries. RUN is a recorded run's id or name,
or "last".

--score DIR runs the detector over a labelled directory (a labels.json beside the
CSVs, as in shared/traces), prints precision, recall, false alarms, detection delay
and OOM-forecast error per family, and exits 1 when the acceptance thresholds
(precision and recall >= 0.95, no false alarm on steady, eval-phase or
variable-length traces, ETA within ±25% for >= 80% of leaking traces) are missed.`,
		Example: `  # analyze a trace
  vramguard analyze trace.csv

  # the same, as one JSON object for scripts
  vramguard analyze trace.csv --json | jq .verdict

  # the newest recorded run
  vramguard analyze last

  # score the detector on labelled traces (several directories add up)
  vramguard analyze --score ../shared/traces/public --score /tmp/seed2`,
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
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(opts.Score) > 0 {
				return analyzeScore(f, opts)
			}
			opts.Target = args[0]
			return analyzeRun(f, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print one JSON object")
	cmd.Flags().StringArrayVar(&opts.Score, "score", nil, "score the detector over a labelled `DIR` (repeatable)")
	return cmd
}

func analyzeRun(f *Factory, opts *analyzeOptions) error {
	samples, err := loadTimeline(f, opts.Target)
	if err != nil {
		return err
	}
	rep := trace.Analyze(samples, analyze.DefaultConfig())
	if opts.JSON {
		return f.WriteJSON(analyzeJSON(rep))
	}
	writeAnalyzeHuman(f.IO.Out, opts.Target, rep)
	return nil
}

// loadTimeline reads a CSV file, or asks the run store for RUN.
func loadTimeline(f *Factory, target string) ([]analyze.Sample, error) {
	st, statErr := os.Stat(target)
	switch {
	case statErr == nil && st.IsDir():
		return nil, Usagef("%s is a directory: want a TRACE.csv (or --score %s for a labelled directory)", target, target)
	case statErr == nil:
		s, err := trace.ReadFile(target)
		if err != nil {
			return nil, Usagef("%v", err)
		}
		if len(s) == 0 {
			return nil, Usagef("%s: no samples after the header", target)
		}
		return s, nil
	case strings.HasSuffix(strings.ToLower(target), ".csv") || strings.ContainsRune(target, os.PathSeparator):
		return nil, Usagef("%s: no such file", target)
	}
	if NewTimelineSource == nil {
		return nil, Usagef("%q is not a file, and recorded runs cannot be analyzed yet: give a TRACE.csv", target)
	}
	src, err := NewTimelineSource(f)
	if err != nil {
		return nil, Envf("open recorded runs: %v", err)
	}
	s, err := src.Timeline(target)
	if err != nil {
		return nil, Usagef("run %q: %v", target, err)
	}
	if len(s) == 0 {
		return nil, Failf("run %q has no memory samples", target)
	}
	return s, nil
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
	if o.Evidence == nil {
		o.Evidence = []string{}
	}
	if o.Advice == nil {
		o.Advice = []string{}
	}
	if o.OOMETA != nil {
		o.OOMETAInterval = []any{num(r.OOMETALow), num(r.OOMETAHigh)}
	}
	if r.HostLeak != nil {
		h := analyzeJSON(*r.HostLeak)
		o.HostLeak = &h
	}
	return o
}

func writeAnalyzeHuman(w io.Writer, target string, r analyze.Report) {
	head := map[analyze.Verdict]string{
		analyze.VerdictLeak:             "LEAK",
		analyze.VerdictCacheGrowth:      "CACHE GROWTH (not a leak)",
		analyze.VerdictStable:           "stable",
		analyze.VerdictInsufficientData: "not enough data to judge",
	}[r.Verdict]
	if r.Verdict == analyze.VerdictLeak && r.Ambiguous {
		head = "UNBOUNDED GROWTH (leak or fragmentation: only NVML watched)"
	}
	fmt.Fprintf(w, "%s: %s  (confidence %.2f, %d samples)\n", target, head, r.Confidence, r.Samples)
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
}

// humanBytes and humanDur format as the analysis's own evidence does.
var (
	humanBytes = units.FormatBytes[float64]
	humanDur   = analyze.FormatDuration
)

var errScoreFailed = errors.New("acceptance thresholds missed")
