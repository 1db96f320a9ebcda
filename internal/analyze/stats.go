package analyze

import "math"

// Robust statistics over small, bounded sets of window levels. Every routine
// here works in caller-provided scratch space so that the detector allocates
// nothing once it is warm.

// trend is a Theil–Sen fit with its Mann–Kendall significance.
type trend struct {
	slope     float64 // median pairwise slope (units per second)
	lo, hi    float64 // ~95% confidence interval of the slope (Sen 1968)
	intercept float64 // median of y - slope*x
	z         float64 // Mann–Kendall Z (no tie correction: conservative)
	noise     float64 // 1.4826 * MAD of the residuals
	n         int
}

// fitTrend fits y = intercept + slope*x over points (x ascending) with
// Theil–Sen and scores it with Mann–Kendall. scratch must hold n(n-1)/2 values.
func fitTrend(x, y []float64, scratch []float64) trend {
	return fit(x, y, scratch, fitFull)
}

// How much of a fit to compute: the slope alone is one selection over the
// pairs; the interval is two more.
const (
	fitSlope = iota
	fitLine  // slope, intercept and residual noise
	fitFull  // and the slope's confidence interval
)

func fit(x, y []float64, scratch []float64, what int) trend {
	n := len(x)
	tr := trend{n: n}
	if n < 3 {
		return tr
	}
	s := 0
	m := 0
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			dy := y[j] - y[i]
			switch {
			case dy > 0:
				s++
			case dy < 0:
				s--
			}
			dx := x[j] - x[i]
			if dx <= 0 {
				continue
			}
			scratch[m] = dy / dx
			m++
		}
	}
	if m == 0 {
		return tr
	}
	sl := scratch[:m]
	tr.slope = quantileSelect(sl, 0.5)
	fn := float64(n)
	varS := fn * (fn - 1) * (2*fn + 5) / 18
	switch {
	case s > 0:
		tr.z = float64(s-1) / math.Sqrt(varS)
	case s < 0:
		tr.z = float64(s+1) / math.Sqrt(varS)
	}
	if what == fitSlope {
		return tr
	}
	if what == fitFull {
		// Sen's interval: ranks (N -/+ 1.96 sqrt(VarS)) / 2 of the ordered slopes.
		c := 1.96 * math.Sqrt(varS)
		lo := (float64(m) - c) / 2
		hi := (float64(m)+c)/2 + 1
		tr.lo = rankSelect(sl, int(math.Max(0, math.Floor(lo))))
		tr.hi = rankSelect(sl, int(math.Min(float64(m-1), math.Floor(hi))))
	}
	// intercept and residual noise, reusing the scratch space
	r := scratch[:n]
	for i := 0; i < n; i++ {
		r[i] = y[i] - tr.slope*x[i]
	}
	tr.intercept = quantileSelect(r, 0.5)
	for i := 0; i < n; i++ {
		r[i] = math.Abs(y[i] - tr.slope*x[i] - tr.intercept)
	}
	tr.noise = 1.4826 * quantileSelect(r, 0.5)
	return tr
}

// mannKendallFromS is the Mann–Kendall Z of n points whose S is s (no tie
// correction: conservative).
func mannKendallFromS(s, n int) float64 {
	if n < 3 {
		return 0
	}
	fn := float64(n)
	sd := math.Sqrt(fn * (fn - 1) * (2*fn + 5) / 18)
	switch {
	case s > 0:
		return float64(s-1) / sd
	case s < 0:
		return float64(s+1) / sd
	}
	return 0
}

// mannKendallZ is the Mann–Kendall Z of y alone: O(n²) comparisons without
// a division, so a run that shows no trend is turned down cheaply.
func mannKendallZ(y []float64) float64 {
	n := len(y)
	if n < 3 {
		return 0
	}
	s := 0
	for i := 0; i < n; i++ {
		yi := y[i]
		for _, yj := range y[i+1:] {
			if yj > yi {
				s++
			} else if yj < yi {
				s--
			}
		}
	}
	return mannKendallFromS(s, n)
}

// at is the fitted value at x.
func (t trend) at(x float64) float64 { return t.intercept + t.slope*x }

// quantileSelect returns the q-quantile (nearest rank, averaging the two
// middle values for the median of an even count) of v, reordering v.
func quantileSelect(v []float64, q float64) float64 {
	n := len(v)
	if n == 0 {
		return math.NaN()
	}
	if q == 0.5 && n%2 == 0 {
		a := rankSelect(v, n/2-1)
		// after selecting rank n/2-1, every element right of it is >= it:
		// the next rank is the minimum of the right part
		b := v[n/2]
		for _, x := range v[n/2:] {
			if x < b {
				b = x
			}
		}
		return (a + b) / 2
	}
	k := int(q * float64(n-1))
	return rankSelect(v, k)
}

// rankSelect returns the k-th smallest element of v (0-based), partially
// reordering v so that v[k] holds it, everything left is <= and right is >=.
func rankSelect(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for lo < hi {
		// median of three as the pivot keeps sorted inputs linear
		mid := lo + (hi-lo)/2
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		p := v[mid]
		i, j := lo, hi
		for i <= j {
			for v[i] < p {
				i++
			}
			for v[j] > p {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}

// normalCDF is Φ(z).
func normalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// lowerEnvelopeSlope is the slope of lowerEnvelope.
func lowerEnvelopeSlope(x, y []float64, hull []int) float64 {
	s, _ := lowerEnvelope(x, y, hull)
	return s
}

// lowerEnvelope is the line under every point (x ascending) that lies
// closest to them on the whole: the edge of the lower convex hull above the
// mean of x (the least-absolute-deviation line constrained to stay below the
// points). For points that scatter above a straight level by a one-sided
// gap, as window floors of a sawtooth do, it converges much faster than a
// fit through the middle of the scatter. hull must hold len(x) indices. NaN
// when fewer than two points.
func lowerEnvelope(x, y []float64, hull []int) (slope, intercept float64) {
	n := len(x)
	if n < 2 {
		return math.NaN(), math.NaN()
	}
	h := 0
	for i := 0; i < n; i++ {
		for h >= 2 {
			a, b := hull[h-2], hull[h-1]
			// drop b when it lies on or above the segment a-i
			if (x[b]-x[a])*(y[i]-y[a])-(y[b]-y[a])*(x[i]-x[a]) <= 0 {
				h--
				continue
			}
			break
		}
		hull[h] = i
		h++
	}
	mx := 0.0
	for _, v := range x {
		mx += v
	}
	mx /= float64(n)
	a, b := hull[h-2], hull[h-1]
	for j := 0; j+1 < h; j++ {
		if x[hull[j+1]] >= mx && x[hull[j+1]] > x[hull[j]] {
			a, b = hull[j], hull[j+1]
			break
		}
	}
	if !(x[b] > x[a]) {
		return math.NaN(), math.NaN()
	}
	slope = (y[b] - y[a]) / (x[b] - x[a])
	return slope, y[a] - slope*x[a]
}
