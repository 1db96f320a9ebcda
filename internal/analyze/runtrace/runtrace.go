// Package runtrace turns a recorded timeline (timeline.Sample, as the run
// store keeps it) into the leak detector's input and into a trace CSV, and
// replays it through the detector. `vramguard analyze RUN` and `vramguard
// runs export` go through it; the live monitor converts each sample the same
// way (runtrace.Sample with t0 = the attempt's start), so a
// replay concludes what the monitor concluded from the same samples.
package runtrace

import (
	"io"
	"math"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/analyze/trace"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Attempt returns the samples of attempt n, in the order given.
func Attempt(samples []*timeline.Sample, n int) []timeline.Sample {
	var out []timeline.Sample
	for _, s := range samples {
		if s != nil && s.Attempt == n {
			out = append(out, *s)
		}
	}
	return out
}

// Inputs converts samples to the detector's samples, time in seconds from t0.
func Inputs(samples []timeline.Sample, t0 time.Time) []analyze.Sample {
	out := make([]analyze.Sample, len(samples))
	for i := range samples {
		out[i] = Sample(&samples[i], t0)
	}
	return out
}

// Replay feeds samples, converted with t0 (the attempt's start), in order to
// a new detector with cfg and returns its report after the last one.
func Replay(samples []timeline.Sample, t0 time.Time, cfg analyze.Config) analyze.Report {
	return analyze.Replay(Inputs(samples, t0), cfg)
}

// Rows converts samples to trace CSV rows: the detector's sample (so that
// reading the CSV back gives the detector exactly what Inputs gives it) and
// the host figures it does not read.
func Rows(samples []timeline.Sample, t0 time.Time) []trace.Row {
	out := make([]trace.Row, len(samples))
	for i := range samples {
		s := &samples[i]
		out[i] = trace.Row{Sample: Sample(s, t0), PSS: opt(s.PSS), CgroupUsage: opt(s.CgroupUsage)}
	}
	return out
}

// WriteCSV writes samples as a trace CSV (trace.Header and trace.Extras),
// time in seconds from t0, absent figures as empty cells.
func WriteCSV(w io.Writer, samples []timeline.Sample, t0 time.Time) error {
	tw := trace.NewWriter(w)
	for _, r := range Rows(samples, t0) {
		if err := tw.Write(r); err != nil {
			return err
		}
	}
	return tw.Flush()
}

func opt(p *uint64) float64 {
	if p == nil {
		return math.NaN()
	}
	return float64(*p)
}

// Sample converts s to the leak detector's sample, with time counted
// in seconds from t0 (the attempt's start). Absent figures become NaN.
func Sample(s *timeline.Sample, t0 time.Time) analyze.Sample {
	a := analyze.NaNSample(s.T.Sub(t0).Seconds())
	a.RSS = float64(s.RSS)
	if s.NProcs == 0 && s.RSS == 0 {
		a.RSS = math.NaN()
	}
	if s.Limit > 0 {
		a.Limit = float64(s.Limit)
	}
	f := func(p *uint64) float64 {
		if p == nil {
			return math.NaN()
		}
		return float64(*p)
	}
	if s.GPUUsed != nil && *s.GPUUsed > 0 {
		a.Used = float64(*s.GPUUsed)
	}
	if s.GPUTotal != nil && *s.GPUTotal > 0 {
		a.Total = float64(*s.GPUTotal)
	}
	a.Allocated, a.Reserved = f(s.Allocated), f(s.Reserved)
	a.InactiveSplit, a.AllocRetries = f(s.InactiveSplit), f(s.AllocRetries)
	if s.Step != nil {
		a.Step = *s.Step
	}
	return a
}
