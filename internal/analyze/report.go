package analyze

import (
	"fmt"
	"math"

	"github.com/vramguard/vramguard/internal/units"
)

// Report judges the samples fed so far. It allocates (evidence strings), so
// a live caller asks for it when Add reports a closed window or when it wants
// to show something, not on every sample.
func (d *Detector) Report() Report {
	nan := math.NaN()
	r := Report{
		LeakRate: nan, LeakRatePerStep: nan, LeakStartT: nan, DetectedAtT: nan, TrendRate: nan, TrendStartT: nan,
		OOMETA: nan, OOMETALow: nan, OOMETAHigh: nan, Limit: nan,
		LastT: d.lastT, Samples: d.n, Dropped: d.dropped,
	}
	if d.n == 0 {
		r.LastT = nan
	}
	haveAlloc := d.alloc.n > 0
	gpu := d.used
	gpuLimit := d.total
	if haveAlloc {
		gpu = d.alloc
		gpuLimit = d.total - d.ctxOr0()
	}
	retracted := gpu.n > 0 && gpu.detected && gpu.retracted()
	gpuSeries := SeriesUsed
	if haveAlloc {
		gpuSeries = SeriesAllocated
	}
	switch {
	case gpu.n > 0 && gpu.detected && !retracted:
		series := SeriesUsed
		if haveAlloc {
			series = SeriesAllocated
		}
		d.leak(&r, gpu, gpuLimit, series)
	case haveAlloc && d.corroborated:
		d.leakFromReserved(&r)
	case haveAlloc && (d.reserved.detected || d.used.detected):
		d.cacheGrowth(&r)
	case gpu.n > 0 && gpu.windows() >= d.cfg.MinLevels:
		r.Verdict = VerdictStable
		r.Series = SeriesUsed
		if haveAlloc {
			r.Series = SeriesAllocated
		}
		w := float64(gpu.windows())
		r.Confidence = round2(w / (w + float64(d.cfg.MinLevels)))
		if retracted {
			break
		}
		if z := gpu.trendZ(); z >= d.cfg.ZMin {
			d.trend(&r, gpu, gpuLimit, z)
		} else {
			r.Evidence = append(r.Evidence, fmt.Sprintf("%s floor (the level each window returns to) shows no persistent rise over %s",
				r.Series, FormatDuration(gpu.lastT-gpu.tiers[0].closed.at(0).t0)))
		}
	case gpu.n == 0 && d.rss.n > 0 && d.rss.windows() >= d.cfg.MinLevels:
		// a job without GPU series (a CPU job): its host memory is the
		// series it has, judged as a GPU series would be
		r.Verdict = VerdictStable
		r.Series = SeriesRSS
		w := float64(d.rss.windows())
		r.Confidence = round2(w / (w + float64(d.cfg.MinLevels)))
		if z := d.rss.trendZ(); z >= d.cfg.ZMin {
			// rising, but not (yet) the steady rise a leak verdict needs:
			// not stable, and said in the series' own terms
			r.Verdict = VerdictInsufficientData
			r.Confidence = 0
			d.trend(&r, d.rss, d.limit, z)
		} else {
			r.Evidence = append(r.Evidence, fmt.Sprintf("host resident memory (rss) floor (the level each window returns to) shows no persistent rise over %s",
				FormatDuration(d.rss.lastT-d.rss.tiers[0].closed.at(0).t0)))
		}
	case gpu.n == 0 && d.rss.n > 0:
		r.Verdict = VerdictInsufficientData
		r.Series = SeriesRSS
		r.Evidence = append(r.Evidence, fmt.Sprintf("the job has no GPU series; its host memory (rss): need %d windows of at least %gs and %d samples to judge a leak; have %d over %s of %s (the first %s of a series are a warm-up, not judged)",
			d.cfg.MinLevels, d.cfg.WindowS, d.cfg.MinWindowSamples, d.rss.windows(), units.Plural(d.rss.n, "sample"),
			FormatDuration(d.rss.lastT-d.rss.firstT), FormatDuration(d.cfg.WarmupS)))
	default:
		r.Verdict = VerdictInsufficientData
		r.Evidence = append(r.Evidence, fmt.Sprintf("need %d windows of at least %gs and %d samples to judge; have %d",
			d.cfg.MinLevels, d.cfg.WindowS, d.cfg.MinWindowSamples, gpu.windows()))
	}
	if retracted && r.Verdict != VerdictLeak {
		// the online detector raised a leak that the whole timeline does not
		// bear out: say so, and keep when it was raised (an alert went out)
		r.DetectedAtT = gpu.detectedAt
		r.Evidence = append(r.Evidence, fmt.Sprintf("a rise of the %s floor raised as a leak at t=%.0fs did not persist: fitted from where it began, the floor no longer rises",
			gpuSeries, gpu.detectedAt))
	}
	if d.rss.n > 0 && d.rss.detected {
		h := Report{LeakRate: nan, LeakRatePerStep: nan, LeakStartT: nan, DetectedAtT: nan, TrendRate: nan, TrendStartT: nan,
			OOMETA: nan, OOMETALow: nan, OOMETAHigh: nan, Limit: nan, LastT: d.lastT, Samples: d.n}
		d.leak(&h, d.rss, d.limit, SeriesRSS)
		h.Advice = []string{"host memory is growing: look for objects copied into DataLoader workers (use numpy arrays or " +
			"tensors instead of Python lists/dicts in the Dataset), and for histories of tensors kept on the CPU"}
		if r.Verdict == VerdictLeak {
			r.HostLeak = &h
		} else {
			hh := h
			r = hh
			r.HostLeak = nil
		}
	}
	d.runway(&r)
	if r.Verdict == VerdictInsufficientData && r.Series == SeriesRSS && r.Runway != nil {
		// too short to call a leak, yet rising to its limit: what was seen
		r.Evidence = append(r.Evidence, "meanwhile, the rise it has: "+r.Runway.Evidence)
	}
	return r
}

// runway sets r.Runway from the host memory's runway forecast, against the
// host limit (the job's cgroup, else the machine). GPU series are left to
// the leak test: with a few samples per bin, the floors of an activation
// sawtooth (and a weights warm-up that levels off near the device's size)
// are not steady enough to forecast from, and a growing allocator cache is
// freed before an OOM, not the tensors.
func (d *Detector) runway(r *Report) {
	if d.runRSS == nil {
		return
	}
	var best *Runway
	try := func(b *binner, s Series, limit float64) {
		if !ok(limit) || len(b.bins) == 0 {
			return
		}
		rw, found := RunwayOf(b.bins, s, limit, d.cfg.Runway)
		if !found {
			return
		}
		// counted from the last sample, as the leak forecast is
		past := math.Max(0, d.lastT-rw.AtT)
		rw.ETA = math.Max(0, rw.ETA-past)
		rw.ETALow = math.Max(0, rw.ETALow-past)
		rw.ETAHigh = math.Max(0, rw.ETAHigh-past)
		rw.AtT = d.lastT
		if best == nil || rw.ETA < best.ETA {
			best = &rw
		}
	}
	try(d.runRSS, SeriesRSS, d.limit)
	r.Runway = best
}

func (d *Detector) ctxOr0() float64 {
	if math.IsNaN(d.ctx) {
		return 0
	}
	return d.ctx
}

// leak fills r from a latched track of series (allocated, used or rss).
func (d *Detector) leak(r *Report, k *track, limit float64, series Series) {
	f, _ := k.newest()
	r.Verdict = VerdictLeak
	r.Series = series
	r.Ambiguous = series == SeriesUsed
	r.LeakStartT = k.riseStart()
	r.DetectedAtT = k.detectedAt
	e, fitted := k.estimate(r.LeakStartT)
	if !fitted {
		e = estimate{tr: f.tr, slope: f.tr.slope, peak: k.last}
		e.tr.lo, e.tr.hi = f.tr.slope, f.tr.slope
	}
	r.LeakRate = e.slope
	r.LeakRatePerStep = d.perStep(e.slope)
	conf := 2*normalCDF(f.tr.z) - 1
	if r.Ambiguous {
		conf *= 0.8
	}
	r.Confidence = round2(math.Min(conf, 0.99))
	what := map[Series]string{
		SeriesAllocated: "allocated floor (the level the step sawtooth returns to)",
		SeriesUsed:      "NVML used memory (floor per window)",
		SeriesRSS:       "host resident memory (floor per window)",
	}[series]
	span := k.lastT - r.LeakStartT
	r.Evidence = append(r.Evidence, fmt.Sprintf("%s rose %s over %s since t=%.0fs: %s/s (95%% CI %s/s to %s/s; Theil–Sen over %d windows, lower envelope)",
		what, units.FormatBytes(e.slope*span), FormatDuration(span), r.LeakStartT, units.FormatBytes(e.slope),
		units.FormatBytes(e.tr.lo), units.FormatBytes(e.tr.hi), e.windows))
	r.Evidence = append(r.Evidence, fmt.Sprintf("raised at t=%.0fs: Mann–Kendall Z=%.1f, rising in each third of the span tested and in its newer half, not a single step or a warm-up that levels off",
		k.detectedAt, f.tr.z))
	if !math.IsNaN(r.LeakRatePerStep) {
		r.Evidence = append(r.Evidence, fmt.Sprintf("%s per training step", units.FormatBytes(r.LeakRatePerStep)))
	}
	switch series {
	case SeriesUsed:
		r.Evidence = append(r.Evidence, "only NVML watched this job: tensors kept alive and a growing allocator cache (fragmentation) look alike here; run under `vramguard run` (the probe reports allocated) to tell them apart")
		d.forecast(r, e, limit, "NVML used memory (allocator cache included: the forecast errs early)")
	case SeriesAllocated:
		r.Advice = append(r.Advice,
			"tensors are being kept alive across steps: look for accumulations that keep the graph (`total_loss += loss` instead of `loss.item()`), lists of outputs or losses, and caches keyed by step")
		d.forecast(r, e, limit, "step peaks (allocated at its highest; the limit is the device less the CUDA context)")
	default:
		d.forecast(r, e, limit, "host resident memory (the limit is the cgroup or the machine)")
	}
}

// perStep converts a rate in bytes/s to bytes per training step, when the
// probe reported steps.
func (d *Detector) perStep(rate float64) float64 {
	if d.step0 >= 0 && d.stepN > d.step0 && d.stepTN > d.stepT0 {
		return rate / (float64(d.stepN-d.step0) / (d.stepTN - d.stepT0))
	}
	return math.NaN()
}

// leakFromReserved fills r when the allocated floor is too noisy to show
// the rise but reserved climbs steadily and the allocated floors and peaks
// climb with it.
func (d *Detector) leakFromReserved(r *Report) {
	f := d.reserved.first
	r.Verdict = VerdictLeak
	r.Series = SeriesAllocated
	r.LeakStartT = d.alloc.riseStart()
	r.DetectedAtT = d.corroboratedAt
	e, fitted := d.reserved.estimate(r.LeakStartT)
	if !fitted {
		e = estimate{tr: f.tr, slope: f.tr.slope}
		e.tr.lo, e.tr.hi = f.tr.slope, f.tr.slope
	}
	// the peaks that run into the limit are the allocated ones
	e.peak = d.alloc.peakAt(e.slope, r.LeakStartT)
	r.LeakRate = e.slope
	r.LeakRatePerStep = d.perStep(e.slope)
	r.Confidence = round2(math.Min(0.9*(2*normalCDF(f.tr.z)-1), 0.99))
	span := d.reserved.lastT - r.LeakStartT
	r.Evidence = append(r.Evidence, fmt.Sprintf("reserved rose %s over %s since t=%.0fs: %s/s (Theil–Sen, Mann–Kendall Z=%.1f), and the allocated floors and step peaks rose with it: tensors, not allocator cache",
		units.FormatBytes(e.slope*span), FormatDuration(span), r.LeakStartT, units.FormatBytes(e.slope), f.tr.z))
	r.Evidence = append(r.Evidence, fmt.Sprintf("raised at t=%.0fs; the floor between steps is too noisy here to show the rise on its own", d.corroboratedAt))
	r.Advice = append(r.Advice,
		"tensors are being kept alive across steps: look for accumulations that keep the graph (`total_loss += loss` instead of `loss.item()`), lists of outputs or losses, and caches keyed by step")
	d.forecast(r, e, d.total-d.ctxOr0(), "step peaks (allocated at its highest; the limit is the device less the CUDA context)")
}

// trend fills the OOM forecast of a stable verdict whose floor nevertheless
// rises significantly (Mann–Kendall Z >= ZMin since the warm-up), but not
// yet steadily enough, long enough or in the shape of a leak: the forecast
// at the current trend (Garg et al. 1998), without the verdict.
func (d *Detector) trend(r *Report, k *track, limit, z float64) {
	start := k.riseStart()
	e, fitted := k.estimate(start)
	if !fitted || !(e.slope > 0) {
		return
	}
	name := string(r.Series)
	if r.Series == SeriesRSS {
		name = "host resident memory (rss)"
	}
	r.Evidence = append(r.Evidence, fmt.Sprintf("%s floor rises %s/s since t=%.0fs (Mann–Kendall Z=%.1f), but not yet steadily or long enough to call it a leak",
		name, units.FormatBytes(e.slope), start, z))
	r.TrendRate, r.TrendStartT = e.slope, start
	d.forecast(r, e, limit, forecastWhat(r.Series, "step peaks (allocated at its highest; the limit is the device less the CUDA context)"))
}

// cacheGrowth fills r when reserved (or used) rises while allocated does not.
func (d *Detector) cacheGrowth(r *Report) {
	k, limit := d.reserved, d.total-d.ctxOr0()
	r.Series = SeriesReserved
	if !k.detected {
		k, limit = d.used, d.total
		r.Series = SeriesUsed
	}
	f, _ := k.newest()
	r.Verdict = VerdictCacheGrowth
	e, fitted := k.estimate(f.start)
	if !fitted {
		e = estimate{tr: f.tr, slope: f.tr.slope, peak: k.last}
	}
	r.Confidence = round2(math.Min(2*normalCDF(f.tr.z)-1, 0.99))
	span := k.lastT - f.start
	r.Evidence = append(r.Evidence, fmt.Sprintf("%s rose %s over %s (%s/s, Mann–Kendall Z=%.1f) while the allocated floor stayed flat: the caching allocator holds more than the tensors need",
		r.Series, units.FormatBytes(e.slope*span), FormatDuration(span), units.FormatBytes(e.slope), f.tr.z))
	if ok(d.splitN) {
		r.Evidence = append(r.Evidence, fmt.Sprintf("inactive_split (free fragments inside cached blocks) %s -> %s", units.FormatBytes(d.split0), units.FormatBytes(d.splitN)))
	}
	if ok(d.retriesN) && d.retriesN > 0 {
		r.Evidence = append(r.Evidence, fmt.Sprintf("%.0f allocation retries (cudaMalloc failed, cache flushed, retried)", d.retriesN))
	}
	r.Advice = append(r.Advice,
		"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so the allocator grows segments instead of caching ever more of them",
		"if sizes vary a lot between batches (variable sequence lengths), pad or bucket them to a few shapes")
	d.forecast(r, e, limit, forecastWhat(r.Series, "reserved (the limit is the device less the CUDA context)"))
}

// forecastWhat names what a forecast of series is of, and its limit: NVML
// used memory and host RSS have their own words, any other series dflt.
func forecastWhat(series Series, dflt string) string {
	switch series {
	case SeriesUsed:
		return "NVML used memory"
	case SeriesRSS:
		return "host resident memory (the limit is the cgroup or the machine)"
	}
	return dflt
}

// forecast sets the OOM ETA from estimate e against limit: the time until
// the peaks of what (e.peak now), rising at e.slope, meet the limit (Garg et
// al. 1998), with an interval from the slope's.
func (d *Detector) forecast(r *Report, e estimate, limit float64, what string) {
	if !ok(limit) || limit <= 0 || !(e.slope > 0) || math.IsInf(e.peak, 0) || math.IsNaN(e.peak) {
		return
	}
	r.Limit = limit
	room := math.Max(0, limit-e.peak)
	r.OOMETA = room / e.slope
	r.OOMETALow, r.OOMETAHigh = r.OOMETA, r.OOMETA
	if e.tr.hi > e.slope {
		r.OOMETALow = room / e.tr.hi
	}
	switch {
	case e.tr.lo <= 0:
		r.OOMETAHigh = math.Inf(1)
	case e.tr.lo < e.slope:
		r.OOMETAHigh = room / e.tr.lo
	}
	if room == 0 {
		// resident memory counts shared file pages (a library mapped by
		// several processes) that the cgroup may not be charged for, so a
		// job's RSS can stand above the limit that ends it
		r.Evidence = append(r.Evidence, fmt.Sprintf("%s at %s, at or past its limit of %s: no time left at this rate",
			what, units.FormatBytes(e.peak), units.FormatBytes(limit)))
		return
	}
	r.Evidence = append(r.Evidence, fmt.Sprintf("%s at %s of %s: out of memory in %s (%s to %s) at this rate",
		what, units.FormatBytes(e.peak), units.FormatBytes(limit), FormatDuration(r.OOMETA), FormatDuration(r.OOMETALow), FormatDuration(r.OOMETAHigh)))
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// FormatDuration writes seconds for people (s, m, h, d; "never" for +Inf).
func FormatDuration(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "never"
	case math.IsNaN(s):
		return "?"
	case s < 120:
		return fmt.Sprintf("%.0fs", s)
	case s < 7200:
		return fmt.Sprintf("%.0fm", s/60)
	case s < 2*86400:
		return fmt.Sprintf("%.1fh", s/3600)
	}
	return fmt.Sprintf("%.1fd", s/86400)
}
