package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
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
		for i := range s.Results {
			s.Results[i].Name = filepath.Join(dir, s.Results[i].Name)
		}
		sc.Merge(s)
	}
	misses := trace.Check(sc)
	texts := make([]string, 0, len(misses))
	for _, m := range misses {
		texts = append(texts, m.Text)
	}
	if opts.JSON {
		out := struct {
			trace.Score
			Pass   bool     `json:"pass"`
			Misses []string `json:"misses"`
		}{sc, len(misses) == 0, texts}
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
		return Failf("%v: %s", errScoreFailed, strings.Join(texts, "; "))
	}
	return nil
}

func writeScore(w io.Writer, sc trace.Score, misses []trace.Miss) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "family\ttraces\tpositives\tTP\tFP\tFN\tfalse alarms\tprecision\trecall\tmedian delay\tETA ±25%\tnot at OOM\tmedian ETA err\t")
	row := func(t trace.Tally) {
		delay := "-"
		if t.MedianDelay >= 0 {
			delay = fmt.Sprintf("%.0fs", t.MedianDelay)
		}
		eta, open, etaErr := "-", "-", "-"
		if t.ETAScored > 0 {
			eta = fmt.Sprintf("%d/%d", t.ETAWithin25, t.ETAScored)
			open = fmt.Sprintf("%d/%d", t.ETAOpenIn25, t.ETAOpen)
			etaErr = fmt.Sprintf("%.0f%%", 100*t.MedianETAErr)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t\n", t.Family, t.Traces, t.Positives,
			t.TP, t.FP, t.FN, t.FalseAlarms, t.Precision, t.Recall, delay, eta, open, etaErr)
	}
	for _, t := range sc.Families {
		row(t)
	}
	row(sc.All)
	tw.Flush()
	if len(misses) == 0 {
		fmt.Fprintln(w, "PASS: all acceptance thresholds met")
	}
	fmt.Fprintln(w, "ETA ±25%: leaking traces whose OOM forecast at the last sample is within ±25% of the labelled remaining time;")
	fmt.Fprintln(w, "not at OOM: the same, leaving out traces that stop within two sampling intervals of their labelled OOM")
	for _, r := range sc.Results {
		wrong := (r.Verdict == string(analyze.VerdictLeak)) != r.Positive || (!r.Positive && r.Alarm)
		if wrong {
			fmt.Fprintf(w, "miss: %s (%s) verdict %s, truth %v\n", r.Name, r.Family, r.Verdict, r.Positive)
		}
	}
}
