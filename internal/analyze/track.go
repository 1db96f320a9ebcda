package analyze

import "math"

// finding is a rising floor that passed the segment test on some tier.
type finding struct {
	tr        trend
	start     float64 // time the rise began (change point estimate)
	segT0     float64 // first window of the segment
	segT1     float64 // last window of the segment
	amplitude float64 // largest ceiling-floor gap among the segment's newest windows
	tier      int
}

// track follows one series: windows at every tier, and the trend test run
// each time a window closes.
type track struct {
	cfg   *Config
	tiers []tier
	n     int // samples seen
	// monotone marks a series that holds its peak (reserved, NVML used):
	// under a stationary job its rises are new records, which come ever more
	// rarely (about ln(t1/t0) of them between t0 and t1), while a leak pushes
	// it up at a steady pace
	monotone bool
	firstT   float64
	lastT    float64
	last     float64

	// per-tier consecutive passes, and the newest passing finding per tier
	passes []int
	best   []finding
	has    []bool

	detected   bool    // a finding has persisted (latched)
	detectedAt float64 // time of the sample that made it persist
	active     bool    // the newest test on some tier passes
	first      finding // the finding at detection time

	// scratch, sized once
	x, y, pairs, tmp []float64
}

func newTrack(cfg *Config) *track {
	k := cfg.Levels
	tr := &track{
		cfg:    cfg,
		tiers:  make([]tier, cfg.Tiers),
		passes: make([]int, cfg.Tiers),
		best:   make([]finding, cfg.Tiers),
		has:    make([]bool, cfg.Tiers),
		x:      make([]float64, k),
		y:      make([]float64, k),
		pairs:  make([]float64, k*(k-1)/2+k),
		tmp:    make([]float64, k),
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
		k.firstT = t
	}
	k.n++
	k.lastT, k.last = t, v
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
	k.test(i, l.t1)
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

// test judges tier i after one of its windows closed at time now.
func (k *track) test(i int, now float64) {
	f, ok := k.segment(i)
	k.has[i] = ok
	if !ok {
		k.passes[i] = 0
	} else {
		k.passes[i]++
		k.best[i] = f
	}
	k.active = false
	for j := range k.has {
		if k.has[j] {
			k.active = true
		}
	}
	if ok && !k.detected && k.passes[i] >= k.cfg.Persist && f.segT1-f.segT0 >= k.cfg.MinSpanS {
		k.detected = true
		k.detectedAt = now
		k.first = f
	}
}

// segment looks for the longest run of newest windows on tier i whose floors
// rise steadily: a significant Theil–Sen slope (Mann–Kendall), a rise above
// the residual noise, and a rise in each third of the run (so that a single
// step, a warm-up that levels off, or a saturating cache does not pass).
func (k *track) segment(i int) (finding, bool) {
	r := &k.tiers[i].closed
	n := r.count
	// the job's first minute (loading weights, first steps) is never part of a run
	skip := 0
	for skip < n && r.at(skip).t0 < k.firstT+k.cfg.WarmupS {
		skip++
	}
	if n-skip < k.cfg.MinLevels {
		return finding{}, false
	}
	lens := [4]int{n - skip, n * 3 / 4, n / 2, k.cfg.MinLevels}
	prev := -1
	for _, L := range lens {
		if L < k.cfg.MinLevels || L == prev {
			continue
		}
		prev = L
		s := n - L
		for j := 0; j < L; j++ {
			l := r.at(s + j)
			k.x[j] = l.mid()
			k.y[j] = l.lo
		}
		f, ok := k.judge(k.x[:L], k.y[:L])
		if !ok {
			continue
		}
		if s-skip >= 3 && !k.notDecelerating(r, skip, s, f.tr.slope) {
			// the windows before the run rose faster: growth that is slowing
			// down (a warm-up settling in), not one that has started
			continue
		}
		f.tier = i
		f.segT0, f.segT1 = r.at(s).t0, r.at(n-1).t1
		// amplitude of the step sawtooth from the newest windows
		amp := 0.0
		for j := max(s, n-8); j < n; j++ {
			l := r.at(j)
			amp = math.Max(amp, l.hi-l.lo)
		}
		f.amplitude = amp
		// change point: where the fitted line meets the level before the run
		f.start = f.segT0
		if s > 0 && f.tr.slope > 0 {
			m := 0
			for j := 0; j < s; j++ {
				k.tmp[m] = r.at(j).lo
				m++
			}
			before := quantileSelect(k.tmp[:m], 0.5)
			ts := (before - f.tr.intercept) / f.tr.slope
			f.start = math.Max(r.at(0).t0, math.Min(ts, f.segT0))
		} else if s == 0 {
			f.start = r.at(0).t0
		}
		return f, true
	}
	return finding{}, false
}

// notDecelerating reports whether the windows [from, to) of r, just before a
// run fitted at slope, rose no faster than slope/HalfFrac.
func (k *track) notDecelerating(r *ring, from, to int, slope float64) bool {
	m := 0
	for j := from; j < to && m < len(k.x); j++ {
		l := r.at(j)
		k.x[m], k.y[m] = l.mid(), l.lo
		m++
	}
	pre := fit(k.x[:m], k.y[:m], k.pairs, fitSlope)
	return pre.slope*k.cfg.HalfFrac <= slope
}

// judge applies the rising-floor test to one run of windows.
func (k *track) judge(x, y []float64) (finding, bool) {
	if mannKendallZ(y) < k.cfg.ZMin {
		return finding{}, false
	}
	tr := fit(x, y, k.pairs, fitLine)
	f := finding{tr: tr}
	if tr.slope <= 0 || tr.z < k.cfg.ZMin {
		return f, false
	}
	span := x[len(x)-1] - x[0]
	rise := tr.slope * span
	if rise < k.cfg.MinRiseBytes || rise < k.cfg.NoiseK*tr.noise {
		return f, false
	}
	// persistence inside the run: the median floor of each third must climb by
	// a fair share of what the fitted slope says it should
	n := len(x)
	a, b := n/3, 2*n/3
	m1 := k.medianOf(y[:a])
	m2 := k.medianOf(y[a:b])
	m3 := k.medianOf(y[b:])
	c1 := (x[0] + x[a-1]) / 2
	c2 := (x[a] + x[b-1]) / 2
	c3 := (x[b] + x[n-1]) / 2
	if m2-m1 < k.cfg.ConsistFrac*tr.slope*(c2-c1) || m3-m2 < k.cfg.ConsistFrac*tr.slope*(c3-c2) {
		return f, false
	}
	if k.monotone {
		ups := 0
		for j := 1; j < n; j++ {
			if y[j] > y[j-1] {
				ups++
			}
		}
		t0 := math.Max(x[0]-k.firstT, k.cfg.WindowS)
		t1 := x[n-1] - k.firstT
		if float64(ups) < 2+2*math.Log(t1/t0) {
			return f, false
		}
	}
	// and the newer half must still rise on its own, at a fair share of the
	// whole run's rate: growth that decelerates (a cache filling up, the
	// running peak of variable batches) fails here
	h := n / 2
	t1 := fit(x[:h], y[:h], k.pairs, fitSlope)
	t2 := fit(x[h:], y[h:], k.pairs, fitSlope)
	if t2.z < k.cfg.HalfZMin || t2.slope < k.cfg.HalfFrac*math.Max(tr.slope, t1.slope) {
		return f, false
	}
	return f, true
}

func (k *track) medianOf(v []float64) float64 {
	m := copy(k.tmp, v)
	return quantileSelect(k.tmp[:m], 0.5)
}

// newest returns the passing finding with the longest span, if any tier
// passes now; else the finding from detection time when the track is latched.
func (k *track) newest() (finding, bool) {
	var f finding
	ok := false
	for i := range k.has {
		if k.has[i] && (!ok || k.best[i].segT1-k.best[i].segT0 > f.segT1-f.segT0) {
			f, ok = k.best[i], true
		}
	}
	if !ok && k.detected {
		// no tier passes now: the newest finding any tier had
		f = k.first
		for i := range k.best {
			if k.best[i].segT1 > f.segT1 {
				f = k.best[i]
			}
		}
		return f, true
	}
	return f, ok
}

// windows is the number of closed tier-0 windows seen so far (capped by the ring).
func (k *track) windows() int { return k.tiers[0].closed.count }

// ceilingRises reports whether the window ceilings (step peaks) of this track
// rise over f's span on f's tier: significant (Mann–Kendall Z >= 2) at no less
// than half f's rate.
func (k *track) ceilingRises(f finding) bool {
	r := &k.tiers[f.tier].closed
	m := 0
	for j := 0; j < r.count; j++ {
		l := r.at(j)
		if l.t0 < f.segT0 || l.t1 > f.segT1 {
			continue
		}
		k.x[m], k.y[m] = l.mid(), l.hi
		m++
	}
	if m < k.cfg.MinLevels {
		return false
	}
	tr := fit(k.x[:m], k.y[:m], k.pairs, fitSlope)
	h := m / 2
	t2 := fit(k.x[h:m], k.y[h:m], k.pairs, fitSlope)
	return tr.z >= k.cfg.CeilZMin && tr.slope >= 0.5*f.tr.slope && t2.slope > 0
}

// withInterval fills f's slope confidence interval by refitting the windows
// of its run that the tier still holds (the test itself skips the interval:
// it costs two more selections over every pair).
func (k *track) withInterval(f finding) finding {
	r := &k.tiers[f.tier].closed
	m := 0
	for j := 0; j < r.count; j++ {
		l := r.at(j)
		if l.t0 < f.segT0 || l.t1 > f.segT1 {
			continue
		}
		k.x[m], k.y[m] = l.mid(), l.lo
		m++
	}
	if m < 3 {
		f.tr.lo, f.tr.hi = f.tr.slope, f.tr.slope
		return f
	}
	tr := fitTrend(k.x[:m], k.y[:m], k.pairs)
	f.tr.lo, f.tr.hi = math.Min(tr.lo, f.tr.slope), math.Max(tr.hi, f.tr.slope)
	return f
}
