package analyze

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The verdicts on the shapes a training job's memory takes: each no-leak
// shape must never raise the online alarm, each leak must be found with its
// rate, start and OOM forecast.
func TestDetectorVerdicts(t *testing.T) {
	base, act := 8.0*gib, 6.0*gib
	cases := []struct {
		name    string
		sc      scenario
		verdict Verdict
	}{
		{"steady", scenario{seed: 1, dur: 3000, dt: 1, base: base, act: act, probe: true}, VerdictStable},
		{"steady, sparse samples", scenario{seed: 2, dur: 3000, dt: 5, base: base, act: act, probe: true}, VerdictStable},
		{"eval phases", scenario{seed: 3, dur: 3000, dt: 1, base: base, act: act, evalEvery: 90, evalLen: 30, probe: true}, VerdictStable},
		{"variable-length batches", scenario{seed: 4, dur: 3000, dt: 1, base: base, act: act, varLen: true, probe: true}, VerdictStable},
		{"variable-length batches, NVML only", scenario{seed: 5, dur: 3000, dt: 1, base: base, act: act, varLen: true}, VerdictStable},
		{"gradient accumulation", scenario{seed: 6, dur: 3000, dt: 1, base: base, act: act, accum: 8, grads: 2 * gib, probe: true}, VerdictStable},
		{"warm-up that levels off", scenario{seed: 7, dur: 3000, dt: 1, base: base, act: act, warm: 4 * gib, tau: 200, probe: true}, VerdictStable},
		{"fragmentation", scenario{seed: 8, dur: 3000, dt: 1, base: base, act: act, frag: 3 * mib, probe: true}, VerdictCacheGrowth},
		{"fragmentation, NVML only", scenario{seed: 9, dur: 3000, dt: 1, base: base, act: act, frag: 3 * mib}, VerdictLeak},
		{"linear leak", scenario{seed: 10, dur: 2400, dt: 1, base: base, act: act, leak: 4 * mib, leakAt: 10, probe: true}, VerdictLeak},
		{"late leak", scenario{seed: 11, dur: 2400, dt: 1, base: base, act: act, leak: 3 * mib, leakAt: 900, probe: true}, VerdictLeak},
		{"late leak, sparse samples", scenario{seed: 12, dur: 3000, dt: 5, base: base, act: act, leak: 3 * mib, leakAt: 600, probe: true}, VerdictLeak},
		{"leak with eval phases", scenario{seed: 13, dur: 2400, dt: 2, base: base, act: act, leak: 2 * mib, leakAt: 300, evalEvery: 120, evalLen: 30, probe: true}, VerdictLeak},
		{"leak once per epoch", scenario{seed: 14, dur: 3000, dt: 1, base: base, act: act, leak: 3 * mib, leakAt: 120, epoch: 120, probe: true}, VerdictLeak},
		{"leak, NVML only", scenario{seed: 15, dur: 2400, dt: 2, base: base, act: act, leak: 4 * mib, leakAt: 10}, VerdictLeak},
		{"too short", scenario{seed: 16, dur: 100, dt: 1, base: base, act: act, probe: true}, VerdictInsufficientData},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			samples := c.sc.samples()
			r := run(DefaultConfig(), samples)
			if r.Verdict != c.verdict {
				t.Fatalf("verdict %s, want %s; evidence %q", r.Verdict, c.verdict, r.Evidence)
			}
			if c.sc.leak == 0 {
				if c.verdict != VerdictLeak && !math.IsNaN(r.DetectedAtT) {
					t.Errorf("leak alarm at t=%.0f on a job that does not leak", r.DetectedAtT)
				}
				if c.verdict == VerdictStable && !math.IsNaN(r.OOMETA) {
					t.Errorf("OOM forecast %.0fs on a stable job", r.OOMETA)
				}
				return
			}
			rate := c.sc.leak
			if !c.sc.probe {
				rate *= 1.02 // NVML sees reserved, which caches 2% over the peak here
			}
			if math.Abs(r.LeakRate-rate)/rate > 0.15 {
				t.Errorf("rate %.2f MiB/s, want %.2f", r.LeakRate/mib, rate/mib)
			}
			if tol := math.Max(120, c.sc.epoch); math.Abs(r.LeakStartT-c.sc.leakAt) > tol {
				t.Errorf("start %.0f, want %.0f±%.0f", r.LeakStartT, c.sc.leakAt, tol)
			}
			if !(r.DetectedAtT > c.sc.leakAt) || r.Confidence <= 0.5 {
				t.Errorf("detected at %v (leak from %v), confidence %v", r.DetectedAtT, c.sc.leakAt, r.Confidence)
			}
			want := c.sc.oomT() - samples[len(samples)-1].T
			tol := 0.25
			if !c.sc.probe {
				tol = 0.35 // NVML counts the cache: the forecast comes early
			}
			if math.IsNaN(r.OOMETA) || math.Abs(r.OOMETA-want)/want > tol {
				t.Errorf("OOM in %.0fs, want %.0fs ±%.0f%%", r.OOMETA, want, 100*tol)
			}
			if !(r.OOMETALow <= r.OOMETA && r.OOMETA <= r.OOMETAHigh) {
				t.Errorf("OOM ETA %v outside its interval [%v, %v]", r.OOMETA, r.OOMETALow, r.OOMETAHigh)
			}
		})
	}
}

func TestCacheGrowthNotLeak(t *testing.T) {
	// allocated flat sawtooth; reserved creeps up 3 MiB/s (fragmentation)
	rng := rand.New(rand.NewPCG(7, 1))
	d := NewDetector(DefaultConfig())
	for t := 0.0; t < 2400; t += 1 {
		s := NaNSample(t)
		s.Allocated = 4<<30 + 2<<30*rng.Float64()
		s.Reserved = 7<<30 + 3*mib*t
		s.Used, s.Total = s.Reserved+520*mib, 24<<30
		s.InactiveSplit, s.AllocRetries = 1*mib*t, math.Floor(t/600)
		d.Add(s)
	}
	r := d.Report()
	if r.Verdict != VerdictCacheGrowth || !math.IsNaN(r.DetectedAtT) {
		t.Fatalf("verdict %s detected %v, want cache_growth and no leak alarm; %q", r.Verdict, r.DetectedAtT, r.Evidence)
	}
	if math.IsNaN(r.OOMETA) || len(r.Advice) == 0 {
		t.Errorf("want an OOM forecast and advice: %+v", r)
	}
}

func TestHostLeak(t *testing.T) {
	d := NewDetector(DefaultConfig())
	rng := rand.New(rand.NewPCG(9, 1))
	for t := 0.0; t < 1800; t += 1 {
		s := NaNSample(t)
		s.RSS = 2<<30 + 5*mib*t + 200*mib*rng.Float64()
		s.Limit = 32 << 30
		d.Add(s)
	}
	r := d.Report()
	if r.Verdict != VerdictLeak || r.Series != SeriesRSS || math.IsNaN(r.OOMETA) {
		t.Fatalf("got %s on %s eta %v, want a host leak with a forecast", r.Verdict, r.Series, r.OOMETA)
	}
}

func TestDropsBackwardTime(t *testing.T) {
	d := NewDetector(DefaultConfig())
	d.Add(NaNSample(10))
	d.Add(NaNSample(5))
	d.Add(NaNSample(math.NaN()))
	if r := d.Report(); r.Samples != 1 || r.Dropped != 2 {
		t.Fatalf("samples %d dropped %d, want 1 and 2", r.Samples, r.Dropped)
	}
}

func TestAddDoesNotAllocate(t *testing.T) {
	d := NewDetector(DefaultConfig())
	samples := scenario{seed: 11, dur: 3600, dt: 0.5, base: 4 * gib, act: 2 * gib, leak: 2 * mib, leakAt: 100, probe: true}.samples()
	for _, s := range samples[:len(samples)/2] {
		d.Add(s)
	}
	rest := samples[len(samples)/2:]
	i := 0
	allocs := testing.AllocsPerRun(len(rest)-1, func() {
		d.Add(rest[i])
		i++
	})
	if allocs != 0 {
		t.Fatalf("Add allocates %.2f times per sample, want 0 (memory per series must stay bounded)", allocs)
	}
}

func TestRankSelect(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for n := 1; n < 60; n++ {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(rng.IntN(10)) // ties on purpose
		}
		sorted := append([]float64(nil), v...)
		for i := 1; i < n; i++ {
			for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
				sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
			}
		}
		for k := 0; k < n; k++ {
			w := append([]float64(nil), v...)
			if got := rankSelect(w, k); got != sorted[k] {
				t.Fatalf("n=%d k=%d: got %v want %v", n, k, got, sorted[k])
			}
		}
	}
}

func TestTheilSen(t *testing.T) {
	x := []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	y := []float64{1, 3, 5, 7, 9, 11, 13, 15, 17, 1000} // one wild point
	tr := fitTrend(x, y, make([]float64, 64))
	if tr.slope != 2 || tr.intercept != 1 || tr.z < 3 {
		t.Fatalf("got slope %v intercept %v z %v, want 2, 1, >=3", tr.slope, tr.intercept, tr.z)
	}
}

// BenchmarkDetectorAdd feeds 1 Hz timelines with a probe (allocated,
// reserved and used: three series per sample) to one detector. "steady" is
// the costly case: nothing is ever latched, so every closed window is
// tested on every tier; "leak" latches within the first pass and then only
// keeps its windows.
func BenchmarkDetectorAdd(b *testing.B) {
	cases := []struct {
		name    string
		samples []Sample
	}{
		{"steady", scenario{seed: 1, dur: 7200, dt: 1, base: 4 * gib, act: 6 * gib, probe: true}.samples()},
		{"leak", scenario{seed: 1, dur: 7200, dt: 1, base: 4 * gib, act: 6 * gib, leak: mib, leakAt: 600, probe: true}.samples()},
		{"steady-nvml", scenario{seed: 1, dur: 7200, dt: 1, base: 4 * gib, act: 6 * gib}.samples()},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			d := NewDetector(DefaultConfig())
			b.ReportAllocs()
			b.ResetTimer()
			off := 0.0
			for i := 0; i < b.N; i++ {
				k := i % len(c.samples)
				if k == 0 && i > 0 {
					off += c.samples[len(c.samples)-1].T + 1
				}
				s := c.samples[k]
				s.T += off
				d.Add(s)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// The Mann–Kendall S each window keeps for the run from it to the newest
// window must equal the S counted afresh, as windows come and the oldest go.
func TestRingSuffixS(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	r := ring{buf: make([]level, 7)}
	for step := range 40 {
		r.push(level{lo: float64(rng.IntN(6)), n: 1}) // ties on purpose
		for i := 0; i < r.count; i++ {
			want := 0
			for a := i; a < r.count; a++ {
				for b := a + 1; b < r.count; b++ {
					switch ya, yb := r.at(a).lo, r.at(b).lo; {
					case yb > ya:
						want++
					case yb < ya:
						want--
					}
				}
			}
			if got := r.at(i).s; got != want {
				t.Fatalf("after %d pushes: S from window %d = %d, want %d", step+1, i, got, want)
			}
		}
	}
}

// The lower envelope of floors that sit above a rising level by a one-sided
// gap stays under every floor and pins the slope more tightly than
// Theil–Sen's line through the middle of them.
func TestLowerEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	const n, draws = 24, 300
	x := make([]float64, n)
	y := make([]float64, n)
	hull := make([]int, n)
	pairs := make([]float64, n*n)
	var envSq, tsSq float64
	for range draws {
		for i := range x {
			x[i] = float64(30 * i)
			y[i] = 1000 + 2*x[i] + 300*rng.ExpFloat64()
		}
		s, c := lowerEnvelope(x, y, hull)
		for i := range x {
			if y[i] < c+s*x[i]-1e-6 {
				t.Fatalf("point %d (%.1f) below the envelope (%.1f)", i, y[i], c+s*x[i])
			}
		}
		envSq += (s - 2) * (s - 2)
		ts := fitTrend(x, y, pairs).slope
		tsSq += (ts - 2) * (ts - 2)
	}
	env, ts := math.Sqrt(envSq/draws), math.Sqrt(tsSq/draws)
	if env > 0.16 || env > 0.8*ts {
		t.Errorf("slope error (rms) %.3f for the envelope, %.3f for Theil–Sen: want the envelope under 0.16 and 0.8× Theil–Sen", env, ts)
	}
	for _, c := range []struct {
		name string
		x, y []float64
	}{
		{"one point", []float64{1}, []float64{1}},
		{"same time", []float64{1, 1}, []float64{1, 2}},
	} {
		if s, _ := lowerEnvelope(c.x, c.y, hull); !math.IsNaN(s) {
			t.Errorf("%s: slope %v, want NaN", c.name, s)
		}
	}
}

// A series that holds its peak passes the step test when it rises a little
// in many windows, not when a few big jumps make the rise (the running peak
// of outsized batches).
func TestStepsJumps(t *testing.T) {
	cfg := DefaultConfig()
	k := newTrack(&cfg)
	k.monotone = true
	cases := []struct {
		name string
		rise func(j int) float64
		want bool
	}{
		{"steady", func(j int) float64 { return float64(j) * 40 * mib }, true},
		{"every other window", func(j int) float64 { return float64(j/2) * 80 * mib }, true},
		{"three jumps", func(j int) float64 {
			switch {
			case j >= 14:
				return 3 * gib
			case j >= 12:
				return 2 * gib
			case j >= 5:
				return 1 * gib
			}
			return 0
		}, false},
	}
	for _, c := range cases {
		x := make([]float64, 16)
		y := make([]float64, 16)
		for j := range x {
			x[j] = 600 + 30*float64(j)
			y[j] = 10*gib + c.rise(j)
		}
		if got := k.steps(x, y); got != c.want {
			t.Errorf("%s: steps = %v, want %v", c.name, got, c.want)
		}
	}
}

// The start of a rise that follows a flat stretch is the bend; a rise that
// has gone on since the job began starts with the job.
func TestRiseStart(t *testing.T) {
	for _, c := range []struct {
		name   string
		sc     scenario
		want   float64
		tolSec float64
	}{
		{"late", scenario{seed: 21, dur: 2400, dt: 1, base: 8 * gib, act: 2 * gib, leak: 3 * mib, leakAt: 1000, probe: true}, 1000, 90},
		{"from the start", scenario{seed: 22, dur: 2400, dt: 1, base: 8 * gib, act: 2 * gib, leak: 3 * mib, leakAt: 5, probe: true}, 0, 30},
	} {
		d := NewDetector(DefaultConfig())
		for _, s := range c.sc.samples() {
			d.Add(s)
		}
		if got := d.alloc.riseStart(); math.Abs(got-c.want) > c.tolSec {
			t.Errorf("%s: start %.0f, want %.0f±%.0f", c.name, got, c.want, c.tolSec)
		}
	}
}
