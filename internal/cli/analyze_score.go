package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/analyze/trace"
)

func analyzeScore(f *Factory, opts *analyzeOptions) error {
	var sc trace.Score
	for _, dir := range opts.Score {
		if _, err := os.Stat(dir); err != nil {
			return Usagef("--score %s: %v", dir, err)
		}
		s, err := trace.ScoreDir(dir, analyze.DefaultConfig())
		if err != nil {
			return Usagef("--score %s: %v", dir, err)
		}
		sc.Merge(s)
	}
	misses := trace.Check(sc)
	if opts.JSON {
		out := struct {
			trace.Score
			Pass   bool     `json:"pass"`
			Misses []string `json:"misses"`
		}{sc, len(misses) == 0, misses}
		if out.Misses == nil {
			out.Misses = []string{}
		}
		if err := f.WriteJSON(out); err != nil {
			return err
		}
	} else {
		writeScore(f.IO.Out, sc, misses)
	}
	if len(misses) > 0 {
		if opts.JSON {
			return Silent(ExitFailed)
		}
		return Failf("%v: %s", errScoreFailed, strings.Join(misses, "; "))
	}
	return nil
}

func writeScore(w io.Writer, sc trace.Score, misses []string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "family\ttraces\tpositives\tTP\tFP\tFN\tfalse alarms\tprecision\trecall\tmedian delay\tETA ±25%\tmedian ETA err\t")
	row := func(t trace.Tally) {
		delay := "-"
		if t.MedianDelay >= 0 {
			delay = fmt.Sprintf("%.0fs", t.MedianDelay)
		}
		eta, etaErr := "-", "-"
		if t.ETAScored > 0 {
			eta = fmt.Sprintf("%d/%d", t.ETAWithin25, t.ETAScored)
			etaErr = fmt.Sprintf("%.0f%%", 100*t.MedianETAErr)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%s\t%s\t%s\t\n", t.Family, t.Traces, t.Positives,
			t.TP, t.FP, t.FN, t.FalseAlarms, t.Precision, t.Recall, delay, eta, etaErr)
	}
	for _, t := range sc.Families {
		row(t)
	}
	row(sc.All)
	tw.Flush()
	if len(misses) == 0 {
		fmt.Fprintln(w, "PASS: all acceptance thresholds met")
	}
	for _, r := range sc.Results {
		wrong := (r.Verdict == string(analyze.VerdictLeak)) != r.Positive || (!r.Positive && r.Alarm)
		if wrong {
			fmt.Fprintf(w, "miss: %s (%s) verdict %s, truth %v\n", r.Name, r.Family, r.Verdict, r.Positive)
		}
	}
}
