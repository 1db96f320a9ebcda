package analyze

import (
	"fmt"
	"math"
)

// finding is a rising floor that passed the segment test on some tier.
type finding struct {
	tr    trend   // Theil–Sen fit of the run's floors
	start float64 // time the rise began (change point estimate)
	segT0 float64 // first window of the run
	segT1 float64 // last window of the run
	tier  int
	joint bool // passed only with the ceilings' corroboration
	L     int
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
	// last time the series was reset), while a leak pushes it up at a
	// steady pace
	monotone bool
	name     string
	sawtooth bool    // a step sawtooth (allocated): ceilings corroborate floors
	mid      bool    // judge the middle of floor and ceiling (a sawtooth), not the floor
	origin   float64 // monotone: time of the last reset (the cache handed back: empty_cache())
	peak     float64 // monotone: highest value since origin
	firstT   float64
	lastT    float64
	last     float64

	passes []int     // per tier: consecutive closes whose test passed
	since  []float64 // per tier: when the current streak of passes began
	best   []finding // per tier: the newest passing finding

	detected   bool    // a finding has persisted (latched); tests stop
	detectedAt float64 // time of the sample that made it persist
	first      finding // the finding at detection time

	// scratch, sized once
	x, y, pairs, tmp []float64
	hull             []int
}

func newTrack(cfg *Config) *track {
	k := cfg.Levels
	tr := &track{
		cfg:    cfg,
		tiers:  make([]tier, cfg.Tiers),
		passes: make([]int, cfg.Tiers),
		since:  make([]float64, cfg.Tiers),
		best:   make([]finding, cfg.Tiers),
		x:      make([]float64, k+1),
		y:      make([]float64, k+1),
		pairs:  make([]float64, k*(k+1)/2+k+1),
		tmp:    make([]float64, k+1),
		hull:   make([]int, k+1),
	}
	for i := range tr.tiers {
		tr.tiers[i].closed.buf = make([]level, k)
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
	if k.passes[i] == 0 {
		k.since[i] = now
	}
	k.passes[i]++
	k.best[i] = f
	span := f.segT1 - f.segT0
	if k.passes[i] >= k.cfg.Persist && span >= k.cfg.MinSpanS && now-k.since[i] >= k.cfg.PersistFrac*span {
		k.detected = true
		k.detectedAt = now
		k.first = f
	}
}

// segment looks for a run of newest windows on tier i whose floors rise
// steadily: a significant Theil–Sen slope (Mann–Kendall), a rise above the
// residual noise, a rise in each third of the run and in its newer half (so
// that a single step, a warm-up that levels off or a saturating cache does
// not pass), and windows before the run that did not rise faster.
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
	lens := [4]int{avail, 24, 16, k.cfg.MinLevels}
	prev := -1
	for _, L := range lens {
		if L > avail || L < k.cfg.MinLevels || L == prev {
			continue
		}
		prev = L
		s := n - L
		k.runPoints(r, s, L)
		if debugReject != nil {
			debugCtx = fmt.Sprintf("%s t=%.0f tier=%d L=%d [%.0f..%.0f]: ", k.name, r.at(n-1).t1, i, L, r.at(s).t0, r.at(n-1).t1)
		}
		f, ok := k.judge(k.x[:L], k.y[:L], bar{k.cfg.ZMin, k.cfg.HalfZMin})
		if ok && k.sawtooth {
			// the ceilings must not contradict the floors: under a leak
			// both rise, while a run of low floors by chance leaves the
			// ceilings where they were
			if z := k.ceilingZ(r, s, L); z < k.cfg.CeilZMin {
				ok = false
				rej("ceilz")
				k.runPoints(r, s, L)
			}
		}
		if !ok && k.sawtooth {
			// floors and ceilings are two looks at the same level: a rise
			// that both show, each at a lower bar, is as unlikely by chance
			if f, ok = k.judge(k.x[:L], k.y[:L], bar{k.cfg.ZJoint, k.cfg.HalfZJoint}); ok {
				ok = k.ceilingsRise(r, s, L, f.tr.slope)
				f.joint = true
				if !ok {
					rej("ceil")
				}
			}
		}
		if ok && debugReject != nil {
			debugReject(debugCtx + "judge ok")
		}
		if !ok {
			continue
		}
		f.tier = i
		f.L = L
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
			if rej("pre") {
				continue
			}
		}
		if !ok && f.segT1-f.segT0 < k.cfg.JobStartSpanS {
			if rej("jobstart") {
				continue
			}
		}
		f.start = k.changePoint(r, skip, s, f)
		return f, true
	}
	return finding{}, false
}

// ceilingsRise reports whether the ceilings (step peaks) of the run of L
// windows from s rise with its floors: Mann–Kendall Z >= ZJoint over the run
// and >= HalfZJoint over its newer half, at no less than half the floors'
// slope. Evaluation phases lower some ceilings and outsized batches raise
// some, which costs significance but makes no trend.
func (k *track) ceilingsRise(r *ring, s, L int, slope float64) bool {
	for j := 0; j < L; j++ {
		l := r.at(s + j)
		k.x[j], k.y[j] = l.thi, l.hi
	}
	x, y := k.x[:L], k.y[:L]
	if mannKendallZ(y) < k.cfg.ZJoint || mannKendallZ(y[L/2:]) < k.cfg.HalfZJoint {
		return false
	}
	return fit(x, y, k.pairs, fitSlope).slope >= 0.5*slope
}

// ceilingZ is the Mann–Kendall Z of the ceilings of the run of L windows
// from s. It overwrites k.x and k.y.
func (k *track) ceilingZ(r *ring, s, L int) float64 {
	for j := 0; j < L; j++ {
		k.y[j] = r.at(s + j).hi
	}
	return mannKendallZ(k.y[:L])
}

// runPoints fills k.x, k.y with the run of L windows from s: the floors, or
// for a sawtooth series (mid) the middle of each window's floor and ceiling,
// the ceiling replaced by the floor plus the run's typical amplitude where it
// strays (an evaluation phase lowers it, an outsized batch raises it).
func (k *track) runPoints(r *ring, s, L int) {
	if !k.mid {
		for j := 0; j < L; j++ {
			l := r.at(s + j)
			k.x[j], k.y[j] = l.tlo, l.lo
		}
		return
	}
	for j := 0; j < L; j++ {
		l := r.at(s + j)
		k.tmp[j] = l.hi - l.lo
	}
	amp := quantileSelect(k.tmp[:L], 0.5)
	for j := 0; j < L; j++ {
		l := r.at(s + j)
		hi := l.hi
		if d := hi - l.lo; d < 0.75*amp || d > 1.25*amp {
			hi = l.lo + amp
		}
		k.x[j], k.y[j] = (l.t0+l.t1)/2, (l.lo+hi)/2
	}
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
// [a, b], taken from the finest tier that holds at least three of them.
func (k *track) slopeBetween(a, b float64) (float64, bool) {
	if b-a < k.cfg.WindowS*3 {
		return 0, false
	}
	for i := range k.tiers {
		r := &k.tiers[i].closed
		if r.count == 0 || r.at(0).t0 > a+k.cfg.WindowS*float64(int(1)<<i) {
			continue // this tier has already dropped the start of the stretch
		}
		m := 0
		for j := 0; j < r.count && m < len(k.x); j++ {
			l := r.at(j)
			if l.t0 >= a && l.t1 <= b {
				k.x[m], k.y[m] = l.tlo, l.lo
				m++
			}
		}
		if m >= 3 {
			return fit(k.x[:m], k.y[:m], k.pairs, fitSlope).slope, true
		}
		return 0, false
	}
	return 0, false
}

// judge applies the rising-floor test to one run of windows.
var debugReject func(reason string)
var debugCtx string

var debugOff = map[string]bool{}

func rej(reason string) bool {
	if debugOff[reason] {
		return false
	}
	if debugReject != nil {
		debugReject(debugCtx + reason)
	}
	return true
}

// bar is how significant a rise must be: Mann–Kendall Z over the run, and
// over its newer half.
type bar struct{ z, half float64 }

func (k *track) judge(x, y []float64, want bar) (finding, bool) {
	z := mannKendallZ(y)
	if z < k.cfg.ZScreen {
		if rej("mk") {
			return finding{}, false
		}
	}
	n := len(x)
	span := x[n-1] - x[0]
	if z < want.z {
		// not significant by ranks alone: the lower envelope may still rise
		// far above the gap the floors keep over it (a sawtooth's floors sit
		// on the true level plus a one-sided gap; the envelope tracks the
		// level much more tightly than ranks do)
		if k.monotone || float64(n)*k.envelopeRise(x, y)/span < k.cfg.EnvK {
			if rej("mk") {
				return finding{}, false
			}
		}
	}
	tr := fit(x, y, k.pairs, fitLine)
	f := finding{tr: tr}
	if tr.slope <= 0 {
		return f, false
	}
	rise := tr.slope * span
	if rise < k.cfg.MinRiseBytes || rise < k.cfg.NoiseK*tr.noise {
		if rej("rise") {
			return f, false
		}
	}
	// persistence inside the run: the median floor of each third must climb by
	// a fair share of what the fitted slope says it should
	a, b := n/3, 2*n/3
	m1 := k.medianOf(y[:a])
	m2 := k.medianOf(y[a:b])
	m3 := k.medianOf(y[b:])
	c1 := meanOf(x[:a])
	c2 := meanOf(x[a:b])
	c3 := meanOf(x[b:])
	if m2-m1 < k.cfg.ConsistFrac*tr.slope*(c2-c1) || m3-m2 < k.cfg.ConsistFrac*tr.slope*(c3-c2) {
		if rej("thirds") {
			return f, false
		}
	}
	if k.monotone {
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
		// a leak raises the peak a little in many windows; a stationary job
		// with outsized batches raises it in a few big jumps
		if j1+j2 > k.cfg.JumpFrac*(y[n-1]-y[0]) {
			if rej("jumps") {
				return f, false
			}
		}
		// a stationary series sets about ln(t1/t0) new records between t0
		// and t1 (Poisson): demand well above that
		t0 := math.Max(x[0]-k.origin, k.cfg.WindowS)
		t1 := math.Max(x[n-1]-k.origin, t0)
		if float64(ups) < math.Max(2+2*math.Log(t1/t0), k.cfg.UpFrac*float64(n-1)) {
			if rej("records") {
				return f, false
			}
		}
	}
	// and the newer half must still rise on its own, at a fair share of the
	// whole run's rate: growth that decelerates (a cache filling up, the
	// running peak of variable batches, a warm-up) fails here. The slopes are
	// those of the lower envelopes (the line under the floors), which noisy
	// floors move far less than a line through their middle
	h := n / 2
	var e, e1, e2 float64
	if k.mid {
		e, e1, e2 = tr.slope, fit(x[:h], y[:h], k.pairs, fitSlope).slope, fit(x[h:], y[h:], k.pairs, fitSlope).slope
	} else {
		e = lowerEnvelopeSlope(x, y, k.hull)
		e1 = lowerEnvelopeSlope(x[:h], y[:h], k.hull)
		e2 = lowerEnvelopeSlope(x[h:], y[h:], k.hull)
	}
	newer := mannKendallZ(y[h:]) >= want.half
	if !newer && !k.monotone && !k.mid {
		span2 := x[n-1] - x[h]
		newer = float64(n-h)*k.envelopeRise(x[h:], y[h:])/span2 >= k.cfg.EnvHalfK
	}
	if !newer || !(e2 > 0) || e2 < k.cfg.HalfFrac*math.Max(e, e1) {
		if rej("halves") {
			return f, false
		}
	}
	return f, true
}

// envelopeRise is the rise of the lower envelope of (x, y) over its span in
// units of the mean gap between the points and the envelope, times the span
// (so that dividing by the span gives the dimensionless ratio).
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
	if g <= 0 {
		return 0
	}
	return s * (x[len(x)-1] - x[0]) / g * (x[len(x)-1] - x[0])
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

// newest returns the newest passing finding, or the one latched at detection.
func (k *track) newest() (finding, bool) {
	var f finding
	ok := false
	for i := range k.best {
		if k.passes[i] > 0 && (!ok || k.best[i].segT1 > f.segT1) {
			f, ok = k.best[i], true
		}
	}
	if k.detected {
		return k.first, true
	}
	return f, ok
}

// historyPoints fills k.x, k.y with the floors of every window since the
// warm-up at the finest tier that still holds them all (or the coarsest),
// and returns how many.
func (k *track) historyPoints() int {
	from := k.firstT + k.cfg.WarmupS
	ti := len(k.tiers) - 1
	for i := range k.tiers {
		r := &k.tiers[i].closed
		if r.count > 0 && r.at(0).t0 <= from+k.cfg.WindowS*float64(int(1)<<i) {
			ti = i
			break
		}
	}
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
// it. A rise that has gone on since the warm-up has no bend: the first
// judged window's start. Costs O(windows³): for reports, not for samples.
func (k *track) riseStart() float64 {
	from := k.firstT + k.cfg.WarmupS
	m := k.historyPoints()
	if m < 4 {
		if m > 0 {
			return k.x[0]
		}
		return from
	}
	// copies: fit reorders its scratch, not x and y, but medianOf uses tmp
	x, y := k.x[:m], k.y[:m]
	bestCost, bestT := math.Inf(1), x[0]
	minPost := 4
	for c := 0; c+minPost <= m; c++ {
		if c == 1 {
			continue // a level needs two windows
		}
		tr := fit(x[c:], y[c:], k.pairs, fitLine)
		if tr.slope <= 0 {
			continue
		}
		cost := 0.0
		bend := x[c]
		if c > 0 {
			a := k.medianOf(y[:c])
			for j := 0; j < c; j++ {
				cost += math.Abs(y[j] - a)
			}
			bend = math.Max(x[c-1], math.Min(x[c], (a-tr.intercept)/tr.slope))
		}
		for j := c; j < m; j++ {
			cost += math.Abs(y[j] - tr.at(x[j]))
		}
		if cost < bestCost {
			bestCost, bestT = cost, bend
		}
	}
	return bestT
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
	r := &k.tiers[ti].closed
	m := 0
	for j := 0; j < r.count && m < len(k.x); j++ {
		l := r.at(j)
		if l.t0 < start {
			continue
		}
		k.x[m], k.y[m] = l.tlo, l.lo
		m++
	}
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
		if r.count == 0 || r.at(0).t0 > a+k.cfg.WindowS*float64(int(1)<<i) {
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
