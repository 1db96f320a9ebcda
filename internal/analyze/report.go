package analyze

import (
	"fmt"
	"math"
)

// Report judges the samples fed so far. It allocates (evidence strings), so
// a live caller asks for it when Add reports a closed window or when it wants
// to show something, not on every sample.
func (d *Detector) Report() Report {
	nan := math.NaN()
	r := Report{
		LeakRate: nan, LeakRatePerStep: nan, LeakStartT: nan, DetectedAtT: nan,
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
	switch {
	case gpu.n > 0 && gpu.detected:
		d.leak(&r, gpu, gpuLimit, haveAlloc)
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
		r.Evidence = append(r.Evidence, fmt.Sprintf("%s floor (the level each window returns to) shows no persistent rise over %s",
			r.Series, fmtDur(gpu.lastT-gpu.tiers[0].closed.at(0).t0)))
	default:
		r.Verdict = VerdictInsufficientData
		r.Evidence = append(r.Evidence, fmt.Sprintf("need %d windows of at least %gs and %d samples to judge; have %d",
			d.cfg.MinLevels, d.cfg.WindowS, d.cfg.MinWindowSamples, gpu.windows()))
	}
	if d.rss.n > 0 && d.rss.detected {
		h := Report{LeakRate: nan, LeakRatePerStep: nan, LeakStartT: nan, DetectedAtT: nan,
			OOMETA: nan, OOMETALow: nan, OOMETAHigh: nan, Limit: nan, LastT: d.lastT, Samples: d.n}
		d.leak(&h, d.rss, d.limit, false)
		h.Series = SeriesRSS
		h.Ambiguous = false
		h.Evidence = append(h.Evidence[:0:0], h.Evidence...)
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
	return r
}

func (d *Detector) ctxOr0() float64 {
	if math.IsNaN(d.ctx) {
		return 0
	}
	return d.ctx
}

// leak fills r from a latched track.
func (d *Detector) leak(r *Report, k *track, limit float64, probe bool) {
	f, _ := k.newest()
	f = k.withInterval(f)
	r.Verdict = VerdictLeak
	r.Series = SeriesUsed
	if probe {
		r.Series = SeriesAllocated
	}
	r.Ambiguous = !probe
	r.LeakRate = f.tr.slope
	// the newest finding may see only the newest windows; the one that first
	// raised the leak saw its beginning
	r.LeakStartT = math.Min(f.start, k.first.start)
	r.DetectedAtT = k.detectedAt
	if d.step0 >= 0 && d.stepN > d.step0 && d.stepTN > d.stepT0 {
		stepsPerS := float64(d.stepN-d.step0) / (d.stepTN - d.stepT0)
		r.LeakRatePerStep = f.tr.slope / stepsPerS
	}
	d.forecast(r, f, k.lastT, limit)
	conf := 2*normalCDF(f.tr.z) - 1
	if r.Ambiguous {
		conf *= 0.8
	}
	r.Confidence = round2(math.Min(conf, 0.99))
	what := "allocated floor (the level the step sawtooth returns to)"
	if !probe {
		what = "NVML used memory (floor per window)"
	}
	r.Evidence = append(r.Evidence, fmt.Sprintf("%s rose %s over %s: %s/s (95%% CI %s/s to %s/s, Theil–Sen), Mann–Kendall Z=%.1f",
		what, fmtBytes(f.tr.slope*(f.segT1-f.segT0)), fmtDur(f.segT1-f.segT0), fmtBytes(f.tr.slope),
		fmtBytes(f.tr.lo), fmtBytes(f.tr.hi), f.tr.z))
	r.Evidence = append(r.Evidence, fmt.Sprintf("rising since t=%.0fs and in each third of that span, not a single step or a warm-up that levels off; first raised at t=%.0fs",
		f.start, k.detectedAt))
	if !math.IsNaN(r.LeakRatePerStep) {
		r.Evidence = append(r.Evidence, fmt.Sprintf("%s per training step", fmtBytes(r.LeakRatePerStep)))
	}
	if r.Ambiguous {
		r.Evidence = append(r.Evidence, "only NVML watched this job: tensors kept alive and a growing allocator cache (fragmentation) look alike here; run under `vramguard run` (the probe reports allocated) to tell them apart")
	}
	if probe {
		r.Advice = append(r.Advice,
			"tensors are being kept alive across steps: look for accumulations that keep the graph (`total_loss += loss` instead of `loss.item()`), lists of outputs or losses, and caches keyed by step")
	}
}

// leakFromReserved fills r when the allocated floor is too noisy to show
// the rise but reserved climbs steadily and the allocated peaks climb with it.
func (d *Detector) leakFromReserved(r *Report) {
	f, ok := d.reserved.newest()
	if !ok {
		f = d.corroboration
	}
	f = d.reserved.withInterval(f)
	r.Verdict = VerdictLeak
	r.Series = SeriesAllocated
	r.LeakRate = f.tr.slope
	r.LeakStartT = f.start
	r.DetectedAtT = d.corroboratedAt
	if d.step0 >= 0 && d.stepN > d.step0 && d.stepTN > d.stepT0 {
		r.LeakRatePerStep = f.tr.slope / (float64(d.stepN-d.step0) / (d.stepTN - d.stepT0))
	}
	// reserved tracks the allocated peak: its level is the peak
	f.amplitude = 0
	d.forecast(r, f, d.reserved.lastT, d.total-d.ctxOr0())
	r.Confidence = round2(math.Min(0.9*(2*normalCDF(f.tr.z)-1), 0.99))
	r.Evidence = append(r.Evidence, fmt.Sprintf("reserved rose %s over %s: %s/s (Theil–Sen, Mann–Kendall Z=%.1f), and the allocated step peaks rose with it: tensors, not allocator cache",
		fmtBytes(f.tr.slope*(f.segT1-f.segT0)), fmtDur(f.segT1-f.segT0), fmtBytes(f.tr.slope), f.tr.z))
	r.Evidence = append(r.Evidence, fmt.Sprintf("rising since t=%.0fs; first raised at t=%.0fs; the floor between steps is too noisy here to show the rise on its own", f.start, d.corroboratedAt))
	r.Advice = append(r.Advice,
		"tensors are being kept alive across steps: look for accumulations that keep the graph (`total_loss += loss` instead of `loss.item()`), lists of outputs or losses, and caches keyed by step")
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
	f = k.withInterval(f)
	r.Verdict = VerdictCacheGrowth
	d.forecast(r, f, k.lastT, limit)
	r.Confidence = round2(math.Min(2*normalCDF(f.tr.z)-1, 0.99))
	r.Evidence = append(r.Evidence, fmt.Sprintf("%s rose %s over %s (%s/s, Mann–Kendall Z=%.1f) while the allocated floor stayed flat: the caching allocator holds more than the tensors need",
		r.Series, fmtBytes(f.tr.slope*(f.segT1-f.segT0)), fmtDur(f.segT1-f.segT0), fmtBytes(f.tr.slope), f.tr.z))
	if ok(d.splitN) {
		r.Evidence = append(r.Evidence, fmt.Sprintf("inactive_split (free fragments inside cached blocks) %s -> %s", fmtBytes(d.split0), fmtBytes(d.splitN)))
	}
	if ok(d.retriesN) && d.retriesN > 0 {
		r.Evidence = append(r.Evidence, fmt.Sprintf("%.0f allocation retries (cudaMalloc failed, cache flushed, retried)", d.retriesN))
	}
	r.Advice = append(r.Advice,
		"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so the allocator grows segments instead of caching ever more of them",
		"if sizes vary a lot between batches (variable sequence lengths), pad or bucket them to a few shapes")
}

// forecast sets the OOM ETA from finding f at time now against limit.
func (d *Detector) forecast(r *Report, f finding, now, limit float64) {
	if !ok(limit) || limit <= 0 || f.tr.slope <= 0 {
		return
	}
	r.Limit = limit
	peak := f.tr.at(now) + f.amplitude
	room := math.Max(0, limit-peak)
	r.OOMETA = room / f.tr.slope
	r.OOMETALow = room / f.tr.hi
	if f.tr.lo > 0 {
		r.OOMETAHigh = room / f.tr.lo
	} else {
		r.OOMETAHigh = math.Inf(1)
	}
	r.Evidence = append(r.Evidence, fmt.Sprintf("peak %s of %s: out of memory in %s (%s to %s) at this rate",
		fmtBytes(peak), fmtBytes(limit), fmtDur(r.OOMETA), fmtDur(r.OOMETALow), fmtDur(r.OOMETAHigh)))
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func fmtBytes(b float64) string {
	a := math.Abs(b)
	switch {
	case a >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case a >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

func fmtDur(s float64) string {
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
