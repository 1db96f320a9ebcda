package analyze

import "math"

// finding is a rising floor that passed the segment test on some tier.
type finding struct {
	tr    trend   // Theil–Sen fit of the run's floors
	start float64 // time the rise began (change point estimate)
	segT0 float64 // first window of the run
	segT1 float64 // last window of the run
	tier  int
}

// track follows one series: windows at every tier, and the trend test run
// each time a window closes, until a leak is latched.
type track struct {
	cfg   *Config
	tiers []tier
	n     int // samples seen
	// monotone marks a series that holds its peak (reserved, NVML used):
	// under a stationary job its rises are new records, which come ever more
	// rarely (about ln(t1/t0) of them between t0 and t1, counted from the
	// last time the series was reset) and, with outsized batches, in a few
	// big jumps, while a leak pushes it up a little at a steady pace
	monotone bool
	// sawtooth marks a series whose windows swing between a floor and a
	// ceiling (allocated): both follow the level, so the ceilings can
	// corroborate (or contradict) what the floors show
	sawtooth bool
	alone    bool    // no other series corroborates this one's rise (NVML used without the probe)
	origin   float64 // monotone: time of the last reset (the cache handed back: empty_cache())
	peak     float64 // monotone: highest value since origin
	firstT   float64
	lastT    float64
	last     float64

	passes []int // per tier: consecutive closes whose test passed

	detected   bool    // a finding has persisted (latched); tests stop
	detectedAt float64 // time of the sample that made it persist
	first      finding // the finding at detection time

	// scratch, sized once: the run being judged (x, y), other series of
	// windows (x2, y2), pairwise slopes, a copy for selections, hull indices
	x, y, x2, y2, pairs, tmp []float64
	hull                     []int
}

func newTrack(cfg *Config) *track {
	k := cfg.Levels + 1 // the closed windows of a tier and the open one
	tr := &track{
		cfg:    cfg,
		tiers:  make([]tier, cfg.Tiers),
		passes: make([]int, cfg.Tiers),
		x:      make([]float64, k),
		y:      make([]float64, k),
		x2:     make([]float64, k),
		y2:     make([]float64, k),
		pairs:  make([]float64, k*(k-1)/2+k),
		tmp:    make([]float64, k),
		hull:   make([]int, k),
	}
	for i := range tr.tiers {
		tr.tiers[i].closed.buf = make([]level, cfg.Levels)
	}
	return tr
}

// add feeds one value; t never decreases (the detector drops samples that go
// back in time). It returns true when a window closed on some tier.
func (k *track) add(t, v float64) bool {
	if k.n == 0 {
		k.firstT, k.origin, k.peak = t, t, v
	}
	k.n++
	k.lastT, k.last = t, v
	if k.monotone {
		if v < k.peak-k.cfg.MinRiseBytes {
			// the series fell well below its peak: the cache was handed back,
			// new records start over from here
			k.origin, k.peak = t, v
		} else if v > k.peak {
			k.peak = v
		}
	}
	t0 := &k.tiers[0]
	t0.cur.add(t, v)
	if t0.cur.t1-t0.cur.t0 < k.cfg.WindowS || t0.cur.n < k.cfg.MinWindowSamples {
		return false
	}
	k.close(0)
	return true
}

func (k *track) close(i int) {
	ti := &k.tiers[i]
	l := ti.cur
	ti.cur = level{}
	ti.closed.push(l)
	if !k.detected {
		k.test(i, l.t1)
	}
	if i+1 < len(k.tiers) {
		up := &k.tiers[i+1]
		up.cur.merge(l)
		up.children++
		if up.children >= k.cfg.TierFactor {
			up.children = 0
			k.close(i + 1)
		}
	}
}

// test judges tier i after one of its windows closed at time now, and
// latches a leak once a tier has passed Persist closes in a row over a run
// spanning MinSpanS.
func (k *track) test(i int, now float64) {
	f, ok := k.segment(i)
	if !ok {
		k.passes[i] = 0
		return
	}
	k.passes[i]++
	if k.passes[i] >= k.cfg.Persist && f.segT1-f.segT0 >= k.cfg.MinSpanS {
		k.detected = true
		k.detectedAt = now
		k.first = f
	}
}

// segment looks for a run of newest windows on tier i whose floors rise
// steadily: significant (Mann–Kendall, or the lower envelope's rise against
// the floors' gap above it), above the residual noise, in each third of the
// run and in its newer half (so that a single step, a warm-up that levels
// off or a saturating cache does not pass), with windows before the run that
// did not rise faster. The run lengths tried are every window since the
// warm-up, 24, 16 and MinLevels: the longer ones see slow leaks, the shorter
// ones leaks that started lately.
func (k *track) segment(i int) (finding, bool) {
	r := &k.tiers[i].closed
	n := r.count
	// the job's first minute (loading weights, first steps) is never part of
	// a run, nor, for a series that holds its peak, what came before a reset
	skip := 0
	for skip < n && (r.at(skip).t0 < k.firstT+k.cfg.WarmupS || (k.monotone && r.at(skip).t0 < k.origin)) {
		skip++
	}
	avail := n - skip
	if avail < k.cfg.MinLevels {
		return finding{}, false
	}
	x, y := k.x[:avail], k.y[:avail]
	for j := range avail {
		l := r.at(skip + j)
		x[j], y[j] = l.tlo, l.lo
	}
	lens := [4]int{avail, 24, 16, k.cfg.MinLevels}
	prev := -1
	for _, L := range lens {
		if L > avail || L < k.cfg.MinLevels || L == prev {
			continue
		}
		prev = L
		j0 := avail - L
		z := mannKendallFromS(r.at(skip+j0).s, L)
		if z < math.Min(k.cfg.ZScreen, k.cfg.ZJoint) {
			continue
		}
		s := skip + j0 // the run's first window in r
		f, ok := k.judge(x[j0:], y[j0:], z, bar{k.cfg.ZMin, k.cfg.HalfZMin})
		if ok && k.sawtooth && k.ceilingZ(r, s, L) < k.cfg.CeilZMin {
			// the ceilings contradict the floors: under a leak both rise,
			// while a run of low floors by chance leaves the ceilings be
			ok = false
		}
		if !ok && k.sawtooth {
			// floors and ceilings are two looks at the same level: a rise
			// that both show, each at a lower bar, is as unlikely by chance
			if f, ok = k.judge(x[j0:], y[j0:], z, bar{k.cfg.ZJoint, k.cfg.HalfZJoint}); ok {
				ok = k.ceilingsRise(r, s, L, f.tr.slope)
			}
		}
		if !ok {
			continue
		}
		f.tier = i
		f.segT0, f.segT1 = r.at(s).t0, r.at(n-1).t1
		// the stretch before the run, as long as the run, at the finest
		// tier that still holds it: it must not have risen faster (growth
		// that is slowing down, a warm-up settling in, is not a leak); when
		// the run reaches back to the job's start there is no such stretch,
		// and a rise that may be a warm-up must first go on long enough
		// without slowing down
		from := math.Max(k.firstT+k.cfg.WarmupS, 2*f.segT0-f.segT1)
		pre, ok := k.slopeBetween(from, f.segT0)
		if ok && pre*k.cfg.HalfFrac > f.tr.slope {
			continue
		}
		if !ok && f.segT1-f.segT0 < k.cfg.JobStartSpanS {
			continue
		}
		f.start = k.changePoint(r, skip, s, f)
		return f, true
	}
	return finding{}, false
}

// bar is how significant a rise must be: Mann–Kendall Z over the run, and
// over its newer half.
type bar struct{ z, half float64 }

// judge applies the rising-floor test to one run of windows (x ascending),
// whose Mann–Kendall Z is z.
func (k *track) judge(x, y []float64, z float64, want bar) (finding, bool) {
	n := len(x)
	span := x[n-1] - x[0]
	if !(span > 0) || z < k.cfg.ZScreen {
		return finding{}, false
	}
	if z < want.z {
		// not significant by ranks alone: the lower envelope may still rise
		// far above the gap the floors keep over it (a sawtooth's floors sit
		// on the true level plus a one-sided gap; the envelope follows the
		// level much more tightly than ranks do)
		if k.monotone || float64(n)*k.envelopeRise(x, y) < k.cfg.EnvK {
			return finding{}, false
		}
	}
	if k.monotone && !k.steps(x, y) {
		return finding{}, false
	}
	tr := fit(x, y, k.pairs, fitLine)
	tr.z = z
	f := finding{tr: tr}
	if tr.slope <= 0 {
		return f, false
	}
	rise := tr.slope * span
	if rise < k.cfg.MinRiseBytes || rise < k.cfg.NoiseK*tr.noise {
		return f, false
	}
	// persistence inside the run: the median floor of each third must climb by
	// a fair share of what the fitted slope says it should
	a, b := n/3, 2*n/3
	m1 := k.medianOf(y[:a])
	m2 := k.medianOf(y[a:b])
	m3 := k.medianOf(y[b:])
	c1, c2, c3 := meanOf(x[:a]), meanOf(x[a:b]), meanOf(x[b:])
	if m2-m1 < k.cfg.ConsistFrac*tr.slope*(c2-c1) || m3-m2 < k.cfg.ConsistFrac*tr.slope*(c3-c2) {
		return f, false
	}
	// and the newer half must still rise on its own, at a fair share of the
	// whole run's rate: growth that decelerates (a cache filling up, the
	// running peak of variable batches, a warm-up) fails here. The slopes are
	// those of the lower envelopes (the line under the floors), which noisy
	// floors move far less than a line through their middle
	h := n / 2
	e := lowerEnvelopeSlope(x, y, k.hull)
	e1 := lowerEnvelopeSlope(x[:h], y[:h], k.hull)
	e2 := lowerEnvelopeSlope(x[h:], y[h:], k.hull)
	newer := mannKendallZ(y[h:]) >= want.half
	if !newer && !k.monotone {
		newer = float64(n-h)*k.envelopeRise(x[h:], y[h:]) >= k.cfg.EnvHalfK
	}
	if !newer || !(e2 > 0) || e2 < k.cfg.HalfFrac*math.Max(e, e1) {
		return f, false
	}
	return f, true
}

// steps applies the tests of a series that holds its peak to a run of its
// floors: more rises from one window to the next than the ~ln(t1/t0) new
// records a stationary job sets, and no two of them making most of the rise
// (a leak raises the peak a little in many windows; outsized batches raise
// it in a few big jumps).
func (k *track) steps(x, y []float64) bool {
	n := len(y)
	ups := 0
	j1, j2 := 0.0, 0.0 // the two largest rises from one window to the next
	for j := 1; j < n; j++ {
		if d := y[j] - y[j-1]; d > 0 {
			ups++
			if d > j1 {
				j1, j2 = d, j1
			} else if d > j2 {
				j2 = d
			}
		}
	}
	if k.alone && j1+j2 > k.cfg.JumpFrac*(y[n-1]-y[0]) {
		return false
	}
	t0 := math.Max(x[0]-k.origin, k.cfg.WindowS)
	t1 := math.Max(x[n-1]-k.origin, t0)
	return float64(ups) >= k.cfg.RecordsBase+k.cfg.RecordsPerLog*math.Log(t1/t0)
}

// envelopeRise is the rise of the lower envelope of (x, y) over its span in
// units of the mean gap between the points and the envelope: about 40/n or
// less for n independent floors of a level that does not move (the 0.1%
// tail, by simulation), so it is compared as n times this against EnvK.
func (k *track) envelopeRise(x, y []float64) float64 {
	s, c := lowerEnvelope(x, y, k.hull)
	if !(s > 0) {
		return 0
	}
	g := 0.0
	for i := range x {
		g += y[i] - (c + s*x[i])
	}
	g /= float64(len(x))
	if !(g > 0) {
		return 0
	}
	return s * (x[len(x)-1] - x[0]) / g
}

// ceilingZ is the Mann–Kendall Z of the ceilings of the run of L windows
// of r from s.
func (k *track) ceilingZ(r *ring, s, L int) float64 {
	for j := range L {
		k.y2[j] = r.at(s + j).hi
	}
	return mannKendallZ(k.y2[:L])
}

// ceilingsRise reports whether the ceilings (step peaks) of the run of L
// windows of r from s rise with its floors: Mann–Kendall Z >= ZJoint over the
// run and >= HalfZJoint over its newer half, at no less than half the
// floors' slope. Evaluation phases lower some ceilings and outsized batches
// raise some, which costs significance but makes no trend.
func (k *track) ceilingsRise(r *ring, s, L int, slope float64) bool {
	for j := range L {
		l := r.at(s + j)
		k.x2[j], k.y2[j] = l.thi, l.hi
	}
	x, y := k.x2[:L], k.y2[:L]
	if mannKendallZ(y) < k.cfg.ZJoint || mannKendallZ(y[L/2:]) < k.cfg.HalfZJoint {
		return false
	}
	return fit(x, y, k.pairs, fitSlope).slope >= 0.5*slope
}

// changePoint estimates when the rise of run f (windows s.. of r) began:
// where its fitted line meets the median floor of the windows before it, or
// the run's first window when none are there.
func (k *track) changePoint(r *ring, skip, s int, f finding) float64 {
	if s-skip < 1 || f.tr.slope <= 0 {
		return r.at(s).t0
	}
	m := 0
	for j := skip; j < s && m < len(k.tmp); j++ {
		k.tmp[m] = r.at(j).lo
		m++
	}
	before := quantileSelect(k.tmp[:m], 0.5)
	ts := (before - f.tr.intercept) / f.tr.slope
	return math.Max(r.at(skip).t0, math.Min(ts, r.at(s).t0))
}

// slopeBetween is the Theil–Sen slope of the floors of the windows inside
// [a, b], taken from the finest tier that still holds a and at least three
// windows there.
func (k *track) slopeBetween(a, b float64) (float64, bool) {
	if b-a < k.cfg.WindowS*3 {
		return 0, false
	}
	for i := range k.tiers {
		r := &k.tiers[i].closed
		if r.count == 0 || r.at(0).t0 > a+k.windowS(i) {
			continue // this tier has already dropped the start of the stretch
		}
		m := 0
		for j := 0; j < r.count && m < len(k.x2); j++ {
			l := r.at(j)
			if l.t0 >= a && l.t1 <= b {
				k.x2[m], k.y2[m] = l.tlo, l.lo
				m++
			}
		}
		if m >= 3 {
			return fit(k.x2[:m], k.y2[:m], k.pairs, fitSlope).slope, true
		}
		return 0, false
	}
	return 0, false
}

// windowS is the least length of a tier-i window, seconds.
func (k *track) windowS(i int) float64 {
	return k.cfg.WindowS * math.Pow(float64(k.cfg.TierFactor), float64(i))
}

func (k *track) medianOf(v []float64) float64 {
	m := copy(k.tmp, v)
	return quantileSelect(k.tmp[:m], 0.5)
}

func meanOf(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// windows is the number of closed tier-0 windows seen so far (capped by the ring).
func (k *track) windows() int { return k.tiers[0].closed.count }

// newest returns the finding latched at detection, if any.
func (k *track) newest() (finding, bool) { return k.first, k.detected }

// historyPoints fills k.x, k.y with the floors of every window since the
// warm-up at the finest tier that still holds them all (or the coarsest),
// and returns how many.
func (k *track) historyPoints() int {
	from := k.firstT + k.cfg.WarmupS
	ti := len(k.tiers) - 1
	for i := range k.tiers {
		r := &k.tiers[i].closed
		if r.count > 0 && r.at(0).t0 <= from+k.windowS(i) {
			ti = i
			break
		}
	}
	return k.floorsSince(ti, from)
}

// floorsSince puts the floors (and when each was seen) of tier ti's closed
// windows that begin at from or later into k.x, k.y and returns how many.
func (k *track) floorsSince(ti int, from float64) int {
	r := &k.tiers[ti].closed
	m := 0
	for j := 0; j < r.count && m < len(k.x); j++ {
		l := r.at(j)
		if l.t0 < from {
			continue
		}
		k.x[m], k.y[m] = l.tlo, l.lo
		m++
	}
	return m
}

// trendZ is the Mann–Kendall Z of the floors since the warm-up, 0 unless
// the newer half of them still rises on its own (Z >= HalfZMin): whether the
// series rises now, whatever the shape of the rise. Not for a series that
// holds its peak, whose ranks always rise.
func (k *track) trendZ() float64 {
	m := k.historyPoints()
	if m < k.cfg.MinLevels || k.monotone {
		return 0
	}
	if mannKendallZ(k.y[m/2:m]) < k.cfg.HalfZMin {
		return 0
	}
	return mannKendallZ(k.y[:m])
}

// riseStart estimates when the rise began, after the fact: a hinge (a flat
// level, then a straight rise) fitted by least absolute deviations to the
// floors since the warm-up, at the finest tier that still holds them all;
// the bend is where the rise's Theil–Sen line meets the median level before
// it. A rise that has gone on since the warm-up has no bend: it began with
// the job. Costs O(windows³): for reports, not for samples.
func (k *track) riseStart() float64 {
	from := k.firstT + k.cfg.WarmupS
	m := k.historyPoints()
	if m < 4 {
		if m > 0 {
			return k.x[0]
		}
		return from
	}
	x, y := k.x[:m], k.y[:m]
	// no bend: the rise has gone on since the first window judged, and since
	// the job began if that window is the first after the warm-up
	cost0, bestT := math.Inf(1), x[0]
	if tr := fit(x, y, k.pairs, fitLine); tr.slope > 0 {
		cost0 = 0
		for j := range m {
			cost0 += math.Abs(y[j] - tr.at(x[j]))
		}
	}
	if x[0] < from+2*k.cfg.WindowS*float64(k.cfg.TierFactor) {
		bestT = k.firstT
	}
	// a bend must fit clearly better (by HingeGain) than the straight line:
	// it has one more parameter to fit the noise with
	bestCost := cost0 * k.cfg.HingeGain
	const minPost = 4
	for c := 2; c+minPost <= m; c++ {
		tr := fit(x[c:], y[c:], k.pairs, fitLine)
		if tr.slope <= 0 {
			continue
		}
		a := k.medianOf(y[:c])
		cost := 0.0
		for j := 0; j < c; j++ {
			cost += math.Abs(y[j] - a)
		}
		for j := c; j < m; j++ {
			cost += math.Abs(y[j] - tr.at(x[j]))
		}
		if cost < bestCost {
			bestCost, bestT = cost, math.Max(x[c-1], math.Min(x[c], (a-tr.intercept)/tr.slope))
		}
	}
	return bestT
}

// retracted reports whether the leak latched on k is not borne out after
// the fact: fitted over every window since the rise began (riseStart), the
// floor does not rise. A run of low floors early on can pass the online
// tests by chance; the whole timeline then shows no rate to forecast with.
func (k *track) retracted() bool {
	e, ok := k.estimate(k.riseStart())
	return ok && !(e.slope > 0)
}

// estimate is a leak's rate and where its peak stands, fitted after the
// fact over every window since the rise began.
type estimate struct {
	tr      trend   // Theil–Sen fit of the floors since the start, with its interval
	slope   float64 // the rate used: the lower-envelope slope when it agrees with Theil–Sen
	peak    float64 // the series' peak projected to the last sample, bytes
	windows int     // windows fitted
	tier    int
}

// estimate fits the rise since start. It picks the finest tier whose
// windows still reach back to start (or the coarsest), fits Theil–Sen to the
// floors (robust, with Sen's interval), and the lower envelope of the same
// floors (the line under all of them: for a sawtooth the floors scatter
// above the true level by a gap that shrinks as 1/samples, so the envelope
// pins the slope far more tightly than a median line); the envelope's slope
// is taken when it lies inside Theil–Sen's interval. The peak is the newest
// ceilings projected along that slope to the last sample.
func (k *track) estimate(start float64) (estimate, bool) {
	ti := len(k.tiers) - 1
	for i := range k.tiers {
		r := &k.tiers[i].closed
		if r.count > 0 && r.at(0).t0 <= start {
			ti = i
			break
		}
	}
	// a tier that reaches back far enough may still hold too few windows
	// since start: step down to finer tiers for more points
	for ti > 0 && k.countSince(ti, start) < k.cfg.MinLevels {
		ti--
	}
	m := k.floorsSince(ti, start)
	// the open tier-0 window holds the newest samples
	if c := &k.tiers[0].cur; c.n >= k.cfg.MinWindowSamples/2 && c.t0 >= start && m < len(k.x) && ti == 0 {
		k.x[m], k.y[m] = c.tlo, c.lo
		m++
	}
	if m < 3 {
		return estimate{}, false
	}
	e := estimate{tier: ti, windows: m}
	e.tr = fit(k.x[:m], k.y[:m], k.pairs, fitFull)
	e.slope = e.tr.slope
	if env := lowerEnvelopeSlope(k.x[:m], k.y[:m], k.hull); env >= e.tr.lo && env <= e.tr.hi {
		e.slope = env
	}
	e.peak = k.peakAt(e.slope, start)
	return e, true
}

func (k *track) countSince(ti int, start float64) int {
	r := &k.tiers[ti].closed
	c := 0
	for j := r.count - 1; j >= 0 && r.at(j).t0 >= start; j-- {
		c++
	}
	return c
}

// peakAt projects the ceilings of the newest windows (the last quarter of
// the rise, at least PeakWindows of them, and the open window) along slope to
// the last sample and returns the highest: where the step peaks stand now.
func (k *track) peakAt(slope, start float64) float64 {
	r := &k.tiers[0].closed
	now := k.lastT
	since := math.Max(start, now-math.Max(k.cfg.PeakS, (now-start)/4))
	best := math.Inf(-1)
	take := func(l *level) {
		if v := l.hi + slope*(now-l.thi); v > best {
			best = v
		}
	}
	if c := &k.tiers[0].cur; c.n > 0 {
		take(c)
	}
	for j := r.count - 1; j >= 0; j-- {
		l := r.at(j)
		if l.t1 < since && !math.IsInf(best, -1) {
			break
		}
		take(l)
	}
	return best
}

// follow is what the allocated windows over a span say about a rise seen
// elsewhere (in reserved).
type follow struct {
	lo, hi float64 // slopes of the lower envelope of the floors and the upper envelope of the ceilings
	z      float64 // Stouffer's combination of the floors' and the ceilings' Mann–Kendall Z
	steady bool    // the floors' envelope rises in the newer half at HalfFrac of the older half's slope or more
}

// follows describes the windows inside [a, b], at the finest tier that
// holds a.
func (k *track) follows(a, b float64) (follow, bool) {
	for i := range k.tiers {
		r := &k.tiers[i].closed
		if r.count == 0 || r.at(0).t0 > a+k.windowS(i) {
			continue
		}
		m := 0
		for j := 0; j < r.count && m < len(k.x); j++ {
			l := r.at(j)
			if l.t0 >= a-1 && l.t1 <= b+1 {
				k.x[m], k.y[m] = l.tlo, l.lo
				m++
			}
		}
		if m < k.cfg.MinLevels/2 {
			return follow{}, false
		}
		var f follow
		zf := mannKendallZ(k.y[:m])
		f.lo = lowerEnvelopeSlope(k.x[:m], k.y[:m], k.hull)
		h := m / 2
		e1 := lowerEnvelopeSlope(k.x[:h], k.y[:h], k.hull)
		e2 := lowerEnvelopeSlope(k.x[h:m], k.y[h:m], k.hull)
		f.steady = e2 >= k.cfg.HalfFrac*e1
		m = 0
		for j := 0; j < r.count && m < len(k.x); j++ {
			l := r.at(j)
			if l.t0 >= a-1 && l.t1 <= b+1 {
				k.x[m], k.y[m] = l.thi, -l.hi
				m++
			}
		}
		zc := -mannKendallZ(k.y[:m])
		f.hi = -lowerEnvelopeSlope(k.x[:m], k.y[:m], k.hull)
		f.z = (zf + zc) / math.Sqrt2
		return f, !math.IsNaN(f.lo) && !math.IsNaN(f.hi)
	}
	return follow{}, false
}
