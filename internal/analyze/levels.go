package analyze

// level summarises one window of a series: its floor (the lowest value, the
// level a step sawtooth returns to) and its ceiling (the step peak), each with
// the time it was seen, so that a rising level can be fitted at the right
// place inside a long window.
type level struct {
	t0, t1   float64 // first and last sample time in the window
	lo, hi   float64 // floor and ceiling
	tlo, thi float64 // when the floor and the ceiling were seen
	n        int     // samples
	// s is the Mann–Kendall S of the floors from this window to the newest
	// one its tier holds, kept up to date as windows close (O(windows) per
	// close instead of O(windows²) per test)
	s int
}

func (l *level) add(t, v float64) {
	if l.n == 0 {
		*l = level{t0: t, t1: t, lo: v, hi: v, tlo: t, thi: t, n: 1}
		return
	}
	l.t1 = t
	if v < l.lo {
		l.lo, l.tlo = v, t
	}
	if v >= l.hi {
		l.hi, l.thi = v, t
	}
	l.n++
}

func (l *level) merge(o level) {
	if o.n == 0 {
		return
	}
	if l.n == 0 {
		*l = o
		return
	}
	l.t1 = o.t1
	if o.lo < l.lo {
		l.lo, l.tlo = o.lo, o.tlo
	}
	if o.hi >= l.hi {
		l.hi, l.thi = o.hi, o.thi
	}
	l.n += o.n
}

// ring holds the newest len(buf) closed windows of one tier, oldest first
// when read with at.
type ring struct {
	buf   []level
	head  int // index of the oldest
	count int
}

func (r *ring) push(l level) {
	// the new window joins every suffix: the one from window i gains the
	// signs of l against windows i.. (summed from the newest back)
	l.s = 0
	c := 0
	for i := r.count - 1; i >= 0; i-- {
		o := r.at(i)
		if l.lo > o.lo {
			c++
		} else if l.lo < o.lo {
			c--
		}
		o.s += c
	}
	if r.count < len(r.buf) {
		r.buf[(r.head+r.count)%len(r.buf)] = l
		r.count++
		return
	}
	r.buf[r.head] = l
	r.head = (r.head + 1) % len(r.buf)
}

func (r *ring) at(i int) *level { return &r.buf[(r.head+i)%len(r.buf)] }

// tier builds windows of one resolution. Tier 0 closes a window once it spans
// windowS seconds and holds minSamples samples; tier k>0 closes one after
// factor windows of tier k-1, so each tier sees factor times further back.
type tier struct {
	cur      level
	children int
	closed   ring
}
