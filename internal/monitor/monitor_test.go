package monitor

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// hostSample is a host-only reading i seconds in.
func hostSample(i int, rss float64, limit uint64) timeline.Sample {
	return timeline.Sample{Attempt: 1, T: t0.Add(time.Duration(i) * time.Second), RSS: uint64(rss), NProcs: 1,
		Limit: limit, LimitSource: "cgroup", CPUTicks: uint64(i)}
}

// The leak verdict and its alerts, once per episode, for the series the
// monitor follows; a steady job and a cache warm-up that plateaus raise
// nothing.
func TestObserve(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name      string
		sample    func(i int) timeline.Sample
		wantLeak  int
		wantOOM   int
		wantSerie string
	}{
		{"host leak heading for its limit", func(i int) timeline.Sample {
			// 8 GiB base, a sawtooth, and 4 MiB/s that never comes back
			return hostSample(i, 8*gib+float64(i%20)*(64<<20)+float64(i)*(4<<20), 18*gib)
		}, 1, 1, "rss"},
		{"steady host sawtooth", func(i int) timeline.Sample {
			return hostSample(i, 8*gib+float64(i%20)*(64<<20)+32<<20*math.Sin(float64(i)/7), 64*gib)
		}, 0, 0, ""},
		{"allocator leak the probe reports", func(i int) timeline.Sample {
			s := hostSample(i, 2*gib, 64*gib)
			al := uint64(gib + i%10*(16<<20) + i*(2<<20))
			re := al + 512<<20
			s.Allocated, s.Reserved, s.GPUTotal = &al, &re, timeline.U(80*gib)
			return s
		}, 1, 0, "allocated"},
		{"allocator cache warm-up that plateaus", func(i int) timeline.Sample {
			s := hostSample(i, 2*gib, 64*gib)
			al := uint64(gib + i%10*(16<<20))
			re := uint64(2*gib) + uint64(min(i, 300))*(8<<20)
			s.Allocated, s.Reserved, s.GPUTotal = &al, &re, timeline.U(80*gib)
			return s
		}, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Config{NearLimit: -1}, t0)
			counts := map[timeline.Kind]int{}
			var samples []timeline.Sample
			for i := 0; i < 1800; i++ {
				s := tt.sample(i)
				samples = append(samples, s)
				for _, e := range m.Observe(&s) {
					counts[e.Kind]++
					if e.Message == "" || len(e.Data) == 0 || !e.T.Equal(s.T) {
						t.Errorf("event %+v lacks its message, data or time", e)
					}
				}
			}
			if counts[timeline.KindLeak] != tt.wantLeak || counts[timeline.KindOOMForecast] != tt.wantOOM {
				t.Fatalf("events %v, want %d leak and %d oom_forecast", counts, tt.wantLeak, tt.wantOOM)
			}
			sum := m.Summary()
			if tt.wantLeak == 0 {
				if sum.Leak != nil || sum.Verdict == "leak" {
					t.Errorf("summary %+v, want no leak", sum)
				}
				return
			}
			l := sum.Leak
			if l == nil || l.Series != tt.wantSerie || sum.Verdict != "leak" {
				t.Fatalf("summary %+v leak %+v, want a leak on %s", sum, l, tt.wantSerie)
			}
			if l.LeakStartS < 0 || l.LeakStartS > l.DetectedS || !l.DetectedAt.Equal(t0.Add(time.Duration(l.DetectedS*1e9))) {
				t.Errorf("leak start %.1fs, detected %.1fs at %v", l.LeakStartS, l.DetectedS, l.DetectedAt)
			}
			// a rate of 2 or 4 MiB/s, within the fit's noise
			if want := map[string]float64{"rss": 4 << 20, "allocated": 2 << 20}[tt.wantSerie]; math.Abs(l.LeakRate-want) > 0.25*want {
				t.Errorf("leak rate %.0f B/s, want about %.0f", l.LeakRate, want)
			}
			// the stored timeline replayed gives the same finding
			r := Replay(Config{NearLimit: -1}, t0, samples)
			if r.Leak == nil || r.Leak.DetectedS != l.DetectedS || r.Leak.LeakStartS != l.LeakStartS || r.Verdict != sum.Verdict {
				t.Errorf("replay %+v, live %+v", r.Leak, l)
			}
		})
	}
}

// near_limit compares the quantity the limit is enforced on and is raised
// once per episode.
func TestNearLimit(t *testing.T) {
	m := New(Config{}, t0)
	var got []timeline.Event
	levels := []uint64{50, 85, 91, 95, 80, 92, 70, 71, 93}
	for i, pct := range levels {
		s := hostSample(i, 1, 100<<20)
		// the job's own cgroup is what the limit is enforced on; RSS is not
		s.CgroupLimit, s.CgroupUsage = timeline.U(100<<20), timeline.U(pct<<20)
		got = append(got, m.Observe(&s)...)
	}
	// 91 opens an episode; 80 does not close it (under 72% does); 70 does
	if len(got) != 2 || got[0].T != t0.Add(2*time.Second) || got[1].T != t0.Add(8*time.Second) {
		t.Fatalf("near_limit events %+v", got)
	}
	for _, e := range got {
		if e.Kind != timeline.KindNearLimit {
			t.Errorf("kind %s", e.Kind)
		}
	}
}

// Unsaved work: only after training progress since the last save, once per
// checkpoint; a stall: no output, CPU or progress for StallAfter, once.
func TestCheck(t *testing.T) {
	m := New(Config{UnsavedAfter: time.Minute, StallAfter: 30 * time.Second}, t0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	if evs := m.Check(at(90), 1); len(evs) != 1 || evs[0].Kind != timeline.KindStalled {
		t.Fatalf("idle 90 s: %+v, want a stall only (no training, so nothing unsaved)", evs)
	}
	m = New(Config{UnsavedAfter: time.Minute, StallAfter: 30 * time.Second}, t0)
	m.Progress(at(20))
	m.Output(at(50))
	if evs := m.Check(at(59), 1); len(evs) != 0 {
		t.Fatalf("at 59 s: %+v", evs)
	}
	m.Progress(at(61))
	evs := m.Check(at(61), 1)
	if len(evs) != 1 || evs[0].Kind != timeline.KindUnsaved {
		t.Fatalf("at 61 s: %+v, want unsaved_work", evs)
	}
	if evs := m.Check(at(70), 1); len(evs) != 0 {
		t.Fatalf("second unsaved warning for the same stretch: %+v", evs)
	}
	m.Checkpoint(at(80))
	m.Progress(at(141))
	if evs := m.Check(at(141), 1); len(evs) != 1 || evs[0].Kind != timeline.KindUnsaved {
		t.Fatalf("a minute after the checkpoint: %+v", evs)
	}
	// a single process's silent evaluation after training: its CPU time
	// still counts as activity
	single := New(Config{StallAfter: 30 * time.Second}, t0)
	single.Progress(at(141))
	for i := 142; i < 200; i++ {
		s := hostSample(i, 1<<30, 0)
		single.Observe(&s)
	}
	if evs := single.Check(at(200), 1); len(evs) != 0 {
		t.Fatalf("a busy single-process job after training progress: %+v, want no stall", evs)
	}
	// once a distributed job has made progress, CPU time is no longer
	// activity: a rank spinning in a collective for a rank that stopped
	// makes none
	m.SetDistributed()
	for i := 142; i < 200; i++ {
		s := hostSample(i, 1<<30, 0)
		m.Observe(&s)
	}
	evs = m.Check(at(200), 1)
	if len(evs) != 1 || evs[0].Kind != timeline.KindStalled || !strings.Contains(evs[0].Message, "CPU time does not count") {
		t.Fatalf("59 s of CPU but no progress after training: %+v, want a stall that says CPU did not count", evs)
	}
	// before any progress, CPU time counts as activity (a distributed job's
	// too): samples whose CPU
	// ticks move keep a job alive (loading data, compiling)
	m = New(Config{StallAfter: 30 * time.Second}, t0)
	m.SetDistributed()
	for i := 1; i < 60; i++ {
		s := hostSample(i, 1<<30, 0)
		m.Observe(&s)
	}
	if evs := m.Check(at(60), 1); len(evs) != 0 {
		t.Fatalf("busy job: %+v", evs)
	}
	if evs := m.Check(at(100), 1); len(evs) != 1 || evs[0].Kind != timeline.KindStalled {
		t.Fatalf("40 s without CPU: %+v", evs)
	}
}

// TestFromFindingsFollowsVerdictEvents: a supervised run's summary, as the
// views that read the store rebuild it, has the verdict its own monitor
// last recorded: judging, then stable, then a leak, then stable again.
func TestFromFindingsFollowsVerdictEvents(t *testing.T) {
	verdict := func(v string, n int) timeline.Event {
		b, _ := json.Marshal(timeline.VerdictData{Verdict: v, Series: "allocated", Samples: n})
		return timeline.Event{Kind: timeline.KindVerdict, Data: b}
	}
	leakData, _ := json.Marshal(Finding{Verdict: "leak", Series: "allocated"})
	leak := timeline.Event{Kind: timeline.KindLeak, Data: leakData}
	cases := []struct {
		evs     []timeline.Event
		verdict string
		leak    bool
	}{
		{nil, "", false},
		{[]timeline.Event{verdict("insufficient_data", 1)}, "insufficient_data", false},
		{[]timeline.Event{verdict("insufficient_data", 1), verdict("stable", 300)}, "stable", false},
		{[]timeline.Event{verdict("stable", 300), leak}, "leak", true},
		{[]timeline.Event{verdict("stable", 300), leak, verdict("stable", 900)}, "stable", true},
	}
	for i, c := range cases {
		s := FromFindings(c.evs)
		if s.Verdict != c.verdict || (s.Leak != nil) != c.leak {
			t.Errorf("case %d: verdict %q leak %v, want %q %v", i, s.Verdict, s.Leak != nil, c.verdict, c.leak)
		}
	}
}

// TestRunwayForecastIsItsOwnClaim: a host leak that reaches its limit two
// minutes after the start raises an oom_forecast from the runway (with its
// rate, its basis and an ETA that lands on the limit) long before the kill,
// and no leak: the two claims rest on different evidence.
func TestRunwayForecastIsItsOwnClaim(t *testing.T) {
	const mib = 1 << 20
	const limit = 600 * mib
	rate := 3.0 * mib // from 240 MiB: the limit at t=120s
	m := New(Config{}, t0)
	var got *Finding
	at := 0
	for i := 0; i < 120 && got == nil; i++ {
		s := hostSample(i, 240*mib+rate*float64(i), limit)
		for _, e := range m.Observe(&s) {
			if e.Kind == timeline.KindLeak {
				t.Fatalf("a leak was claimed at t=%ds: %s", i, e.Message)
			}
			if e.Kind == timeline.KindOOMForecast {
				var f Finding
				if err := json.Unmarshal(e.Data, &f); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(e.Message, "not a leak verdict") || !strings.Contains(e.Message, "host memory rising 3 MiB/s") {
					t.Errorf("message %q: want the rate and that it is no leak verdict", e.Message)
				}
				got, at = &f, i
			}
		}
	}
	if got == nil {
		t.Fatal("no forecast before the limit")
	}
	if at > 80 {
		t.Errorf("forecast at t=%ds, want at least 40s (T/3) before the limit at 120s", at)
	}
	if got.Basis != "runway" || got.Series != "rss" || math.Abs(got.LeakRate-rate) > 0.05*rate {
		t.Errorf("finding %+v: want basis runway on rss at 3 MiB/s", got)
	}
	if left := 120 - float64(at); got.OOMETA == nil || math.Abs(*got.OOMETA-left) > 5 {
		t.Errorf("ETA %v at t=%ds, want about %.0fs", got.OOMETA, at, left)
	}
	if s := m.Summary(); s.Leak != nil || s.Forecast == nil {
		t.Errorf("summary: leak %v forecast %v, want a forecast and no leak", s.Leak, s.Forecast)
	}
}

// TestForecastRateWhateverTheSampling: a host series rising linearly to
// its limit gets an OOM forecast with the rate it rises at and when it
// began, whichever claim the forecast rests on. A loaded machine slows
// both the job (its series rises slower on its clock, so the trend test
// may forecast before the runway does) and the sampling (fewer samples a
// window): neither may leave the forecast without its rate. The samples
// are synthetic, their spacing drawn from a seeded generator.
func TestForecastRateWhateverTheSampling(t *testing.T) {
	const mib = 1 << 20
	const limit = 600 * mib
	for _, tt := range []struct {
		every float64 // mean seconds between samples (each 0.5 to 1.5 times it)
		rate  float64 // MiB/s
		basis string
	}{
		{1, 1.3, "runway"}, // a quiet machine
		{3, 0.5, "runway"},
		{1, 0.3, "trend"}, // a slow rise: the trend test forecasts first
		{3, 0.3, "trend"}, // and slow sampling as well
		{5, 0.3, "trend"},
	} {
		t.Run(fmt.Sprintf("every %gs at %g MiB/s", tt.every, tt.rate), func(t *testing.T) {
			rng := rand.New(rand.NewSource(1))
			m := New(Config{}, t0)
			var got *Finding
			var msg string
			for x, rss := 0.0, 0.0; rss < limit; x += tt.every * (0.5 + rng.Float64()) {
				rss = 300*mib + tt.rate*mib*x + 4*mib*rng.Float64()
				s := timeline.Sample{Attempt: 1, T: t0.Add(time.Duration(x * float64(time.Second))), RSS: uint64(rss), NProcs: 1,
					Limit: limit, LimitSource: "cgroup", CPUTicks: uint64(x)}
				for _, e := range m.Observe(&s) {
					if e.Kind == timeline.KindOOMForecast && got == nil {
						got, msg = &Finding{}, e.Message
						if err := json.Unmarshal(e.Data, got); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if got == nil {
				t.Fatal("no forecast before the limit")
			}
			want := tt.rate * mib
			if got.Basis != tt.basis || got.Series != "rss" || math.Abs(got.LeakRate-want) > 0.05*want {
				t.Errorf("forecast on %s (%s) at %.3f MiB/s, want %s on rss at %g MiB/s: %s", got.Series, got.Basis, got.LeakRate/mib, tt.basis, tt.rate, msg)
			}
			if got.LeakStartS < 0 || got.LeakStartS > got.DetectedS || got.LeakStart.Before(t0) {
				t.Errorf("the rise began at t=%.0fs (%v), the forecast came at t=%.0fs", got.LeakStartS, got.LeakStart, got.DetectedS)
			}
			if !strings.Contains(msg, "host memory rising") {
				t.Errorf("message %q does not say the rate", msg)
			}
		})
	}
}
