package analyze

import (
	"fmt"
	"math"

	"github.com/vramguard/vramguard/internal/units"
)

// AlertKind says what an alert is about.
type AlertKind string

// Alert kinds.
const (
	AlertLeak AlertKind = "leak"         // the detector found a leak
	AlertOOM  AlertKind = "oom_forecast" // the OOM forecast fell below the threshold
)

// Alert is raised once per episode.
type Alert struct {
	Kind    AlertKind
	T       float64 // the job time of the report that raised it
	Message string  // one line for a terminal
	Report  Report
}

// AlerterConfig tunes the hysteresis.
type AlerterConfig struct {
	OOMThresholdS float64 // raise when the OOM forecast drops below this (default 600 s)
	ClearFactor   float64 // an OOM episode ends once the forecast is above ClearFactor×threshold (default 2)...
	ClearAfterS   float64 // ...or absent, and a leak episode once no leak is reported, for this long (default 300 s)
}

// DefaultAlerterConfig: OOM under 10 minutes.
func DefaultAlerterConfig() AlerterConfig {
	return AlerterConfig{OOMThresholdS: 600, ClearFactor: 2, ClearAfterS: 300}
}

// Alerter turns a stream of Reports into at most one alert per episode and
// kind. An episode of a kind starts when its condition holds (a leak verdict;
// an OOM forecast below the threshold) and ends only after the condition has
// been clearly off (forecast above ClearFactor×threshold or gone; no leak
// verdict) for ClearAfterS, so a forecast that wobbles around the threshold
// raises one alert, not many. Feed it the detector's report whenever
// Detector.Add returns true. Not safe for concurrent use.
type Alerter struct {
	cfg   AlerterConfig
	state [2]episode
}

type episode struct {
	in       bool
	offSince float64 // NaN while the condition is not clearly off
}

// NewAlerter returns an Alerter; zero fields of cfg take the defaults.
func NewAlerter(cfg AlerterConfig) *Alerter {
	def := DefaultAlerterConfig()
	if cfg.OOMThresholdS <= 0 {
		cfg.OOMThresholdS = def.OOMThresholdS
	}
	if cfg.ClearFactor < 1 {
		cfg.ClearFactor = def.ClearFactor
	}
	if cfg.ClearAfterS <= 0 {
		cfg.ClearAfterS = def.ClearAfterS
	}
	a := &Alerter{cfg: cfg}
	for i := range a.state {
		a.state[i].offSince = math.NaN()
	}
	return a
}

// Observe takes the newest report and returns the alerts it raises (usually none).
func (a *Alerter) Observe(r Report) []Alert {
	var out []Alert
	t := r.LastT
	leak := r.Verdict == VerdictLeak
	if a.step(&a.state[0], t, leak, !leak) {
		out = append(out, Alert{Kind: AlertLeak, T: t, Report: r, Message: leakMessage(r)})
	}
	eta := r.OOMETA
	if r.HostLeak != nil && (math.IsNaN(eta) || r.HostLeak.OOMETA < eta) {
		eta = r.HostLeak.OOMETA
	}
	on := !math.IsNaN(eta) && eta < a.cfg.OOMThresholdS
	off := math.IsNaN(eta) || eta > a.cfg.ClearFactor*a.cfg.OOMThresholdS
	if a.step(&a.state[1], t, on, off) {
		out = append(out, Alert{Kind: AlertOOM, T: t, Report: r,
			Message: fmt.Sprintf("out of memory in about %s at the current trend (%s to %s)", FormatDuration(eta), FormatDuration(r.OOMETALow), FormatDuration(r.OOMETAHigh))})
	}
	return out
}

// step advances one episode and reports whether it just started.
func (a *Alerter) step(e *episode, t float64, on, off bool) bool {
	if !e.in {
		if on {
			e.in = true
			e.offSince = math.NaN()
			return true
		}
		return false
	}
	switch {
	case !off:
		e.offSince = math.NaN()
	case math.IsNaN(e.offSince):
		e.offSince = t
	case t-e.offSince >= a.cfg.ClearAfterS:
		e.in = false
		e.offSince = math.NaN()
	}
	return false
}

func leakMessage(r Report) string {
	what := "GPU memory leak"
	switch {
	case r.Series == SeriesRSS:
		what = "host memory leak"
	case r.Ambiguous:
		what = "GPU memory keeps growing (leak or fragmentation)"
	}
	m := fmt.Sprintf("%s: +%s/s since t=%.0fs", what, units.FormatBytes(r.LeakRate), r.LeakStartT)
	if !math.IsNaN(r.OOMETA) {
		m += fmt.Sprintf(", out of memory in about %s", FormatDuration(r.OOMETA))
	}
	return m
}
