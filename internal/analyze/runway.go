package analyze

import (
	"fmt"
	"math"

	"github.com/vramguard/vramguard/internal/units"
)

// The runway forecast answers one question the leak verdict cannot answer
// early: at the rate memory rises now, when does it meet its limit? The
// leak test needs MinLevels windows of WindowS (five minutes) before it can
// speak, and a job that leaks 1.5 MiB/s into a 600 MiB cgroup is dead by
// then. The runway speaks as soon as the rise is sustained and the limit is
// near in proportion to how long the rise has been watched: it forecasts
// only while ETA <= EvidenceK x the span of the rise, so a short rise (a
// warm-up) never stands for a distant death, and it never says "leak": a job
// that keeps allocating up to its limit and one that leaks look alike this
// early. docs/ANALYSIS.md states the rule and its bound.

// RunwayConfig tunes the runway forecast. Start from DefaultRunwayConfig.
type RunwayConfig struct {
	BinS       float64 // bin width, seconds: a bin keeps its floor and its peak
	BinSamples int     // and the fewest samples a bin closes with (a sawtooth's floor needs several)
	MaxBins    int     // bins kept; when full, pairs merge and the width doubles
	MinBins    int     // fewest bins a rise is judged on
	MinSpanS   float64 // and the shortest span of a rise, seconds
	ZMin       float64 // the floors' Mann–Kendall Z over the rise
	ThirdFrac  float64 // each third of the rise climbs by this share of the fitted rise over a third, or more
	NewestFrac float64 // the newest half's own slope is at least this share of the whole rise's...
	NewestZ    float64 // ...with at least this Mann–Kendall Z on its own
	NoiseK     float64 // the fitted rise exceeds NoiseK times the floors' residual noise
	EvidenceK  float64 // forecast only while ETA <= EvidenceK x the rise's span
}

// DefaultRunwayConfig is the configuration scored in docs/ANALYSIS.md: a
// linear rise that reaches its limit T after it starts is forecast about
// 0.45 T before it gets there (2 <= T <= 10 min), and a rise that stops
// below ~55% of the limit is never forecast.
func DefaultRunwayConfig() RunwayConfig {
	return RunwayConfig{
		BinS:       2.5,
		BinSamples: 3,
		MaxBins:    96,
		MinBins:    12,
		MinSpanS:   40,
		ZMin:       3,
		ThirdFrac:  0.5,
		NewestFrac: 0.7,
		NewestZ:    2,
		NoiseK:     4,
		EvidenceK:  0.85,
	}
}

// Runway is a forecast of the time to a memory limit from a sustained rise.
type Runway struct {
	Series   Series
	Rate     float64 // bytes/s of the rising floor (Theil–Sen)
	RateLo   float64 // ~95% interval of the rate
	RateHi   float64
	Level    float64 // the series' newest peak, bytes
	Limit    float64 // what it runs into, bytes
	SinceT   float64 // when the rise the forecast rests on began
	SpanS    float64 // how long that rise has been watched
	Z        float64 // Mann–Kendall Z of its floors
	Bins     int
	ETA      float64 // seconds from AtT until Level meets Limit at Rate
	ETALow   float64
	ETAHigh  float64 // +Inf when the rate's interval reaches 0
	AtT      float64 // the time the forecast is counted from (end of the newest bin)
	Evidence string
}

// Bin is one stretch of a series: its floor and its peak.
type Bin = level

// RunwayOf forecasts from bins (oldest first, closed, each BinS wide or
// wider) of series against limit. It is a pure function of its input: the
// live detector calls it as each bin closes, tests and benchmarks call it on
// bins they build. ok is false when the bins show no sustained rise or the
// limit is not near enough, in proportion to the rise's span, to forecast.
func RunwayOf(bins []Bin, series Series, limit float64, cfg RunwayConfig) (Runway, bool) {
	nb := len(bins)
	if nb < cfg.MinBins || !(limit > 0) || math.IsInf(limit, 0) {
		return Runway{}, false
	}
	x := make([]float64, nb)
	y := make([]float64, nb)
	scratch := make([]float64, nb*(nb-1)/2+nb)
	last := &bins[nb-1]
	level := last.hi
	if nb >= 2 && bins[nb-2].hi > level {
		level = bins[nb-2].hi // a sawtooth's newest bin may have missed its peak
	}
	if level >= limit {
		return Runway{}, false // at the limit already: nothing left to forecast
	}
	// The longest sustained rise that ends now, from the whole history down
	// to MinBins bins by quarters: a leak that began after a flat stretch is
	// sustained only over its own bins.
	for m := nb; m >= cfg.MinBins; m = shorter(m, cfg.MinBins) {
		w := bins[nb-m:]
		span := last.t1 - w[0].t0
		if span < cfg.MinSpanS {
			break
		}
		for i := range w {
			x[i], y[i] = w[i].tlo, w[i].lo
		}
		tr := fit(x[:m], y[:m], scratch, fitFull)
		if !(tr.slope > 0) || tr.z < cfg.ZMin || tr.slope*span < cfg.NoiseK*tr.noise || !risesInThirds(x[:m], y[:m], tr.slope, cfg.ThirdFrac) {
			continue
		}
		k := m / 2
		newest := fit(x[m-k:m], y[m-k:m], scratch, fitSlope)
		if newest.slope < cfg.NewestFrac*tr.slope || newest.z < cfg.NewestZ {
			continue // slowing down (a warm-up levelling off), or a step and then noise
		}
		room := limit - level
		eta := room / tr.slope
		if eta > cfg.EvidenceK*span {
			continue
		}
		rw := Runway{Series: series, Rate: tr.slope, RateLo: tr.lo, RateHi: tr.hi, Level: level, Limit: limit,
			SinceT: w[0].t0, SpanS: span, Z: tr.z, Bins: m, ETA: eta, ETALow: eta, ETAHigh: eta, AtT: last.t1}
		if tr.hi > tr.slope {
			rw.ETALow = room / tr.hi
		}
		switch {
		case tr.lo <= 0:
			rw.ETAHigh = math.Inf(1)
		case tr.lo < tr.slope:
			rw.ETAHigh = room / tr.lo
		}
		rw.Evidence = fmt.Sprintf("%s rose %s over %s since t=%.0fs: %s/s (95%% CI %s/s to %s/s; Theil–Sen over %d bins of its floor, Mann–Kendall Z=%.1f, rising in each third and no slower in the newest); at %s of %s it reaches the limit in about %s (%s to %s) at this rate. "+
			"This is a forecast from the rate, not a leak verdict: memory that keeps rising to the limit kills the job whether or not it is a leak",
			runwaySeriesName[series], units.FormatBytes(tr.slope*span), FormatDuration(span), w[0].t0,
			units.FormatBytes(tr.slope), units.FormatBytes(tr.lo), units.FormatBytes(tr.hi), m, tr.z,
			units.FormatBytes(level), units.FormatBytes(limit), FormatDuration(rw.ETA), FormatDuration(rw.ETALow), FormatDuration(rw.ETAHigh))
		return rw, true
	}
	return Runway{}, false
}

var runwaySeriesName = map[Series]string{
	SeriesAllocated: "allocated memory (step floors; peaks against the device less the CUDA context)",
	SeriesRSS:       "host resident memory of the job's processes",
	SeriesUsed:      "NVML used memory",
	SeriesReserved:  "reserved memory",
}

// shorter is the next, shorter candidate rise: three quarters of m bins,
// not below least (and always shorter).
func shorter(m, least int) int {
	n := m * 3 / 4
	if n >= m {
		n = m - 1
	}
	if n < least && m > least {
		return least
	}
	return n
}

// risesInThirds reports whether each third of the points climbs, median to
// median, by at least frac of what the fitted slope predicts over the
// distance between them: one step or a rise that stopped fails.
func risesInThirds(x, y []float64, slope, frac float64) bool {
	n := len(x)
	k := n / 3
	if k < 2 {
		return false
	}
	med := func(a, b int) (float64, float64) {
		xs := append([]float64(nil), x[a:b]...)
		ys := append([]float64(nil), y[a:b]...)
		return quantileSelect(xs, 0.5), quantileSelect(ys, 0.5)
	}
	x1, y1 := med(0, k)
	x2, y2 := med(k, n-k)
	x3, y3 := med(n-k, n)
	return y2-y1 >= frac*slope*(x2-x1) && y3-y2 >= frac*slope*(x3-x2)
}

// binner keeps a series' bins, bounded: MaxBins of them, pairs merged and
// the width doubled when full.
type binner struct {
	cfg   *RunwayConfig
	width float64
	open  level
	bins  []level
}

func newBinner(cfg *RunwayConfig) *binner {
	return &binner{cfg: cfg, width: cfg.BinS, bins: make([]level, 0, cfg.MaxBins)}
}

// add feeds one sample and reports whether a bin closed.
func (b *binner) add(t, v float64) bool {
	if b.open.n >= b.cfg.BinSamples && t-b.open.t0 >= b.width {
		b.bins = append(b.bins, b.open)
		b.open = level{}
		if len(b.bins) == b.cfg.MaxBins {
			merged := b.bins[:0]
			for i := 0; i+1 < len(b.bins); i += 2 {
				l := b.bins[i]
				l.merge(b.bins[i+1])
				merged = append(merged, l)
			}
			b.bins = merged
			b.width *= 2
		}
		b.open.add(t, v)
		return true
	}
	b.open.add(t, v)
	return false
}
