package analyze

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// hostJob is a CPU job's host memory as the sampler sees it: RSS every dt
// seconds (jittered), with noise, under a memory limit.
type hostJob struct {
	name   string
	seed   uint64
	dur    float64
	dt     float64
	limit  float64
	rss    func(t float64) float64
	noise  float64 // bytes, uniform ±
	killAt float64 // when rss(t) reaches the limit; 0: never
	grain  float64 // seconds between the leak's steps: the kill time is known to within one
}

func (j hostJob) samples() []Sample {
	rng := rand.New(rand.NewPCG(j.seed, 11))
	var out []Sample
	for t := 0.0; t <= j.dur; t += j.dt * (0.8 + 0.4*rng.Float64()) {
		v := j.rss(t) + j.noise*(2*rng.Float64()-1)
		if v >= j.limit {
			break // the kernel kills the job here
		}
		s := NaNSample(t)
		s.RSS, s.Limit = math.Max(0, v), j.limit
		out = append(out, s)
	}
	return out
}

// firstRunway feeds samples to a detector and returns the first report that
// carries a runway forecast.
func firstRunway(samples []Sample) (Report, bool) {
	d := NewDetector(DefaultConfig())
	for _, s := range samples {
		if d.Add(s) {
			if r := d.Report(); r.Runway != nil {
				return r, true
			}
		}
	}
	return Report{}, false
}

const startRSS = 300 * mib // python with torch imported

// linearLeak reaches limit T seconds after the job starts, rising from
// base after a flat stretch of flat seconds.
func linearLeak(seed uint64, limit, T, flat float64) hostJob {
	rate := (limit - startRSS) / (T - flat)
	return hostJob{name: fmt.Sprintf("leak T=%.0fs flat=%.0fs limit=%s", T, flat, fmtMiB(limit)), seed: seed, dur: T + 60, dt: 1, limit: limit,
		noise: 2 * mib, killAt: T,
		rss: func(t float64) float64 { return startRSS + rate*math.Max(0, t-flat) }}
}

// steppedLeak keeps a chunk every 15 s (one per "epoch" of a small job).
func steppedLeak(seed uint64, limit, T float64) hostJob {
	chunk := (limit - startRSS) / (T / 15)
	return hostJob{name: fmt.Sprintf("stepped leak T=%.0fs", T), seed: seed, dur: T + 60, dt: 1, limit: limit, noise: 2 * mib, killAt: T, grain: 15,
		rss: func(t float64) float64 { return startRSS + chunk*math.Floor(t/15) }}
}

func fmtMiB(b float64) string { return fmt.Sprintf("%.0fMiB", b/mib) }

// TestRunwayForecastsFastLeaks: a leak that reaches its limit T after the
// job starts (2 <= T <= 10 min) is forecast at least T/3 before it gets
// there, with an ETA within 30% of the time actually left (computed from
// the trace's own rate and limit; a leak in steps, within one step more).
func TestRunwayForecastsFastLeaks(t *testing.T) {
	t.Parallel()
	var jobs []hostJob
	seed := uint64(1)
	for _, T := range []float64{120, 150, 180, 240, 300, 360, 480, 600} {
		for _, limit := range []float64{600 * mib, 1 * gib, 4 * gib} {
			jobs = append(jobs, linearLeak(seed, limit, T, 0))
			seed++
		}
		jobs = append(jobs, linearLeak(seed, 1*gib, T, T/6), steppedLeak(seed+1, 1*gib, T))
		seed += 2
	}
	for _, j := range jobs {
		r, ok := firstRunway(j.samples())
		if !ok {
			t.Errorf("%s: no forecast before the kill", j.name)
			continue
		}
		lead := j.killAt - r.LastT
		left := j.killAt - r.LastT
		t.Logf("%s: forecast at t=%.0fs (lead %.0fs = %.2f T), ETA %.0fs, rate %.2f MiB/s", j.name, r.LastT, lead, lead/j.killAt, r.Runway.ETA, r.Runway.Rate/mib)
		if lead < j.killAt/3 {
			t.Errorf("%s: forecast at t=%.0fs, %.0fs before the kill: want at least T/3 = %.0fs", j.name, r.LastT, lead, j.killAt/3)
		}
		if e := r.Runway.ETA; math.Abs(e-left) > 0.3*left+j.grain {
			t.Errorf("%s: ETA %.0fs, but %.0fs were left", j.name, e, left)
		}
		if r.Runway.Series != SeriesRSS || r.Runway.Limit != j.limit {
			t.Errorf("%s: forecast on %s against %.0f, want rss against the limit %.0f", j.name, r.Runway.Series, r.Runway.Limit, j.limit)
		}
		if r.Verdict == VerdictLeak {
			t.Errorf("%s: the forecast came with a leak verdict at t=%.0fs: the two are different claims", j.name, r.LastT)
		}
	}
}

// TestRunwayNoFalseAlarms: jobs that never reach their limit are never
// forecast to: stable, a warm-up that allocates fast for its first minute
// and then holds, a warm-up that levels off, and a cache that grows and
// saturates.
func TestRunwayNoFalseAlarms(t *testing.T) {
	t.Parallel()
	const limit = 4 * gib
	var jobs []hostJob
	for seed := uint64(1); seed <= 4; seed++ {
		jobs = append(jobs,
			hostJob{name: "stable", seed: seed, dur: 1200, dt: 1, limit: limit, noise: 20 * mib,
				rss: func(float64) float64 { return 2 * gib }},
			hostJob{name: "stable, noisy", seed: seed, dur: 1200, dt: 1, limit: limit, noise: 200 * mib,
				rss: func(float64) float64 { return 3 * gib }},
		)
		for _, p := range []float64{0.3, 0.4, 0.5} {
			hold := p * limit
			jobs = append(jobs, hostJob{name: fmt.Sprintf("fast first minute to %.0f%%, then holds", 100*p), seed: seed, dur: 900, dt: 1, limit: limit, noise: 5 * mib,
				rss: func(t float64) float64 { return startRSS + (hold-startRSS)*math.Min(1, t/60) }})
		}
		for _, p := range []float64{0.5, 0.6, 0.7} {
			hold := p * limit
			jobs = append(jobs, hostJob{name: fmt.Sprintf("warm-up levelling off at %.0f%%", 100*p), seed: seed, dur: 900, dt: 1, limit: limit, noise: 5 * mib,
				rss: func(t float64) float64 { return startRSS + (hold-startRSS)*(1-math.Exp(-t/40)) }})
		}
		for _, p := range []float64{0.6, 0.8} {
			hold := p * limit
			jobs = append(jobs, hostJob{name: fmt.Sprintf("cache growing to %.0f%% and saturating", 100*p), seed: seed, dur: 1800, dt: 1, limit: limit, noise: 5 * mib,
				rss: func(t float64) float64 { return 1*gib + (hold-1*gib)*(1-math.Exp(-t/400)) }})
		}
	}
	for _, j := range jobs {
		if r, ok := firstRunway(j.samples()); ok {
			t.Errorf("%s (seed %d): forecast out of memory at t=%.0fs: %s", j.name, j.seed, r.LastT, r.Runway.Evidence)
		}
	}
}
