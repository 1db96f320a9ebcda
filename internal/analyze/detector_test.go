package analyze

import (
	"math"
	"math/rand/v2"
	"testing"
)

const mib = 1 << 20

// job makes a sawtooth timeline: floor base (+leak after leakAt), a step peak
// act above it, sampled at random phases every dt seconds.
func job(seed uint64, dur, dt, base, act, leak, leakAt float64, probe bool) []Sample {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []Sample
	reserved := 0.0
	for t := 0.0; t <= dur; t += dt * (0.8 + 0.4*rng.Float64()) {
		a := base + act*rng.Float64()
		if t > leakAt {
			a += leak * (t - leakAt)
		}
		reserved = math.Max(reserved, math.Ceil(a*1.02/(20*mib))*20*mib)
		s := NaNSample(t)
		if probe {
			s.Allocated, s.Reserved = a, reserved
		}
		s.Used, s.Total = reserved+520*mib, 24<<30
		out = append(out, s)
	}
	return out
}

func run(cfg Config, samples []Sample) Report {
	d := NewDetector(cfg)
	for _, s := range samples {
		d.Add(s)
	}
	return d.Report()
}

func TestDetectorVerdicts(t *testing.T) {
	cases := []struct {
		name    string
		samples []Sample
		verdict Verdict
		rate    float64 // expected leak rate, 0: none
		start   float64
	}{
		{"steady", job(1, 1800, 1, 4<<30, 6<<30, 0, 0, true), VerdictStable, 0, 0},
		{"linear leak", job(2, 1800, 1, 4<<30, 2<<30, 4*mib, 10, true), VerdictLeak, 4 * mib, 10},
		{"late leak", job(3, 2400, 1, 4<<30, 2<<30, 3*mib, 900, true), VerdictLeak, 3 * mib, 900},
		{"nvml-only leak", job(4, 1800, 2, 4<<30, 2<<30, 4*mib, 10, false), VerdictLeak, 4 * mib * 1.02, 10},
		{"too short", job(5, 100, 1, 4<<30, 2<<30, 0, 0, true), VerdictInsufficientData, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(DefaultConfig(), c.samples)
			if r.Verdict != c.verdict {
				t.Fatalf("verdict %s, want %s; evidence %q", r.Verdict, c.verdict, r.Evidence)
			}
			if c.rate == 0 {
				if !math.IsNaN(r.DetectedAtT) || !math.IsNaN(r.OOMETA) {
					t.Errorf("detected at %v, eta %v: want none", r.DetectedAtT, r.OOMETA)
				}
				return
			}
			if math.Abs(r.LeakRate-c.rate)/c.rate > 0.15 {
				t.Errorf("rate %.2f MiB/s, want %.2f", r.LeakRate/mib, c.rate/mib)
			}
			if math.Abs(r.LeakStartT-c.start) > 240 {
				t.Errorf("start %.0f, want %.0f", r.LeakStartT, c.start)
			}
			if !(r.DetectedAtT > c.start) || math.IsNaN(r.OOMETA) || r.Confidence <= 0.5 {
				t.Errorf("detected at %v, eta %v, confidence %v", r.DetectedAtT, r.OOMETA, r.Confidence)
			}
			if !(r.OOMETALow <= r.OOMETA && r.OOMETA <= r.OOMETAHigh) {
				t.Errorf("eta %v outside its interval [%v, %v]", r.OOMETA, r.OOMETALow, r.OOMETAHigh)
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
	samples := job(11, 3600, 0.5, 4<<30, 2<<30, 2*mib, 100, true)
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
		{"steady", job(1, 7200, 1, 4<<30, 6<<30, 0, 0, true)},
		{"leak", job(1, 7200, 1, 4<<30, 6<<30, 1*mib, 600, true)},
		{"steady-nvml", job(1, 7200, 1, 4<<30, 6<<30, 0, 0, false)},
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
