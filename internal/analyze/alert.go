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
	eta, msg := forecastOf(r)
	on := !math.IsNaN(eta) && eta < a.cfg.OOMThresholdS
	off := math.IsNaN(eta) || eta > a.cfg.ClearFactor*a.cfg.OOMThresholdS
	if a.step(&a.state[1], t, on, off) {
		out = append(out, Alert{Kind: AlertOOM, T: t, Report: r, Message: msg})
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

// Forecast is the soonest OOM forecast of a report, whichever claim it
// comes from, with what it rests on.
type Forecast struct {
	ETA, Low, High float64 // seconds from the report's last sample
	Rate           float64 // bytes/s of the rise it projects
	StartT         float64 // when that rise began (NaN: not known)
	Series         Series
	Limit          float64
	// Basis says which claim it is: "leak" (the leak verdict's projection),
	// "trend" (a significant rise the leak test has not called a leak) or
	// "runway" (a sustained rise near its limit, before any verdict).
	Basis    string
	Evidence []string
	Report   Report // the report, or its host leak, the forecast comes from
}

// SoonestForecast is the soonest of r's OOM forecasts (the leak's or
// trend's, the host leak's, the runway's); ok is false when r has none.
func SoonestForecast(r Report) (f Forecast, ok bool) {
	f.ETA = math.NaN()
	basis := func(x Report) string {
		if x.Verdict == VerdictLeak {
			return "leak"
		}
		return "trend"
	}
	consider := func(c Forecast) {
		if !math.IsNaN(c.ETA) && (math.IsNaN(f.ETA) || c.ETA < f.ETA) {
			f = c
		}
	}
	// a trend forecast projects the trend's rise, a leak's the leak's
	own := Forecast{ETA: r.OOMETA, Low: r.OOMETALow, High: r.OOMETAHigh, Rate: r.LeakRate, StartT: r.LeakStartT, Series: r.Series, Limit: r.Limit,
		Basis: basis(r), Evidence: r.Evidence, Report: r}
	if own.Basis == "trend" {
		own.Rate, own.StartT = r.TrendRate, r.TrendStartT
	}
	consider(own)
	if h := r.HostLeak; h != nil {
		consider(Forecast{ETA: h.OOMETA, Low: h.OOMETALow, High: h.OOMETAHigh, Rate: h.LeakRate, StartT: h.LeakStartT, Series: h.Series, Limit: h.Limit,
			Basis: "leak", Evidence: h.Evidence, Report: *h})
	}
	if w := r.Runway; w != nil {
		consider(Forecast{ETA: w.ETA, Low: w.ETALow, High: w.ETAHigh, Rate: w.Rate, StartT: w.SinceT, Series: w.Series, Limit: w.Limit,
			Basis: "runway", Evidence: []string{w.Evidence}, Report: r})
	}
	return f, !math.IsNaN(f.ETA)
}

// Message is the forecast's one line: out of memory in about N at the
// current rate, with the rate, and for a runway that it is no leak verdict.
func (f Forecast) Message() string {
	m := fmt.Sprintf("out of memory in about %s at the current rate (%s to %s)", FormatDuration(f.ETA), FormatDuration(f.Low), FormatDuration(f.High))
	if f.Rate > 0 {
		m += fmt.Sprintf(": %s rising %s/s", seriesWord[f.Series], units.FormatBytes(f.Rate))
		if f.Limit > 0 {
			m += " towards " + units.FormatBytes(f.Limit)
		}
	}
	if f.Basis == "runway" {
		m += fmt.Sprintf(" (a forecast from the last %s of rise, not a leak verdict)", FormatDuration(f.Report.Runway.SpanS))
	}
	return m
}

func forecastOf(r Report) (float64, string) {
	f, ok := SoonestForecast(r)
	if !ok {
		return math.NaN(), ""
	}
	return f.ETA, f.Message()
}

var seriesWord = map[Series]string{
	SeriesAllocated: "allocated GPU memory",
	SeriesReserved:  "reserved GPU memory",
	SeriesUsed:      "GPU memory (NVML)",
	SeriesRSS:       "host memory",
}

// leakMessage names the leak claim: memory that keeps growing across
// steps, with its rate and start. The time to OOM is the forecast's own
// claim (an oom_forecast alert), not part of this one.
func leakMessage(r Report) string {
	what := "GPU memory leak"
	switch {
	case r.Series == SeriesRSS:
		what = "host memory leak"
	case r.Ambiguous:
		what = "GPU memory keeps growing (leak or fragmentation)"
	}
	return fmt.Sprintf("%s: memory keeps growing across steps, +%s/s since t=%.0fs", what, units.FormatBytes(r.LeakRate), r.LeakStartT)
}
