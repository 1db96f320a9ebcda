package runtrace

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/analyze/trace"
	"github.com/vramguard/vramguard/internal/timeline"
)

// recording is a stored attempt's timeline as the sampler leaves it: times
// to the millisecond, figures that come and go (no probe yet, no GPU
// process, a process tree that has exited), and growth when leak > 0.
func recording(seed int64, n int, t0 time.Time, leak float64) []timeline.Sample {
	rng := rand.New(rand.NewSource(seed))
	maybe := func(p float64, v uint64) *uint64 {
		if rng.Float64() < p {
			return nil
		}
		return timeline.U(v)
	}
	var out []timeline.Sample
	at := t0.Add(137 * time.Millisecond)
	for i := range n {
		at = at.Add(time.Duration(900+rng.Intn(200)) * time.Millisecond)
		t := at.Sub(t0).Seconds()
		alloc := uint64(2<<30 + rng.Intn(1<<30) + int(leak*t))
		s := timeline.Sample{Attempt: 2, T: at, RSS: uint64(1<<30 + rng.Intn(1<<24)), NProcs: 1 + rng.Intn(3),
			PSS: maybe(0.3, uint64(900<<20)), CgroupUsage: maybe(0.5, uint64(1200<<20)),
			GPUUsed: maybe(0.1, alloc+(1<<30)), GPUTotal: maybe(0.1, 24<<30)}
		if rng.Intn(10) == 0 {
			s.NProcs, s.RSS = 0, 0 // the tree was gone
		}
		if rng.Intn(3) > 0 {
			s.Limit, s.LimitSource = 16<<30, "cgroup"
		}
		if i > 5 && rng.Intn(20) > 0 {
			step := int64(i * 2)
			s.Allocated, s.Reserved, s.Step = timeline.U(alloc), timeline.U(alloc+(256<<20)), &step
			s.InactiveSplit, s.AllocRetries = maybe(0.2, uint64(rng.Intn(1<<26))), maybe(0.2, uint64(i/100))
		}
		out = append(out, s)
	}
	return out
}

func same(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

// The CSV of an attempt reads back as exactly the detector's input that
// Replay feeds (the live monitor's conversion, Sample), figure for
// figure, absent ones included; so analyzing the CSV concludes what
// replaying the attempt does, in every field of the report.
func TestCSVIsTheReplayInput(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		n    int
		leak float64 // bytes/s
	}{
		{"few samples", 40, 0},
		{"steady, 20 minutes", 1200, 0},
		{"leak, 20 minutes", 1200, 3 << 20},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := recording(int64(i), c.n, t0, c.leak)
			var b bytes.Buffer
			if err := WriteCSV(&b, rec, t0); err != nil {
				t.Fatal(err)
			}
			rows, err := trace.ReadRows(bytes.NewReader(b.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			in := Inputs(rec, t0)
			if len(rows) != len(in) {
				t.Fatalf("%d rows, %d samples", len(rows), len(in))
			}
			for k, r := range rows {
				g, w := r.Sample, in[k]
				if !same(g.T, w.T) || !same(g.Allocated, w.Allocated) || !same(g.Reserved, w.Reserved) || !same(g.Used, w.Used) ||
					!same(g.Total, w.Total) || !same(g.RSS, w.RSS) || !same(g.Limit, w.Limit) ||
					!same(g.InactiveSplit, w.InactiveSplit) || !same(g.AllocRetries, w.AllocRetries) || g.Step != w.Step {
					t.Fatalf("row %d reads as %+v, the replay feeds %+v", k, g, w)
				}
				if s := rec[k]; (s.PSS == nil) != math.IsNaN(r.PSS) || (s.CgroupUsage == nil) != math.IsNaN(r.CgroupUsage) {
					t.Fatalf("row %d: pss %v cgroup_usage %v, recorded %v %v", k, r.PSS, r.CgroupUsage, s.PSS, s.CgroupUsage)
				}
			}
			replayed := Replay(rec, t0, analyze.DefaultConfig())
			fromCSV := trace.Analyze(func() []analyze.Sample {
				s, _ := trace.Read(bytes.NewReader(b.Bytes()))
				return s
			}(), analyze.DefaultConfig())
			if a, b := fmt.Sprintf("%+v", replayed), fmt.Sprintf("%+v", fromCSV); a != b {
				t.Errorf("replay:\n%s\nCSV:\n%s", a, b)
			}
			if c.leak > 0 && replayed.Verdict != analyze.VerdictLeak {
				t.Errorf("a 3 MiB/s leak: verdict %s, %v", replayed.Verdict, replayed.Evidence)
			}
			if c.leak == 0 && replayed.Verdict == analyze.VerdictLeak {
				t.Errorf("no leak: verdict %s, %v", replayed.Verdict, replayed.Evidence)
			}
		})
	}
}

// Replay concludes what a live monitor fed the same samples one by one
// concludes: the report after the last sample, whatever it asked for
// between them.
func TestReplayIsTheLiveVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	rec := recording(7, 1200, t0, 2<<20)
	d := analyze.NewDetector(analyze.DefaultConfig())
	var raised float64 = math.NaN()
	for i := range rec {
		if d.Add(Sample(&rec[i], t0)) {
			if r := d.Report(); r.Verdict == analyze.VerdictLeak && math.IsNaN(raised) {
				raised = r.DetectedAtT
			}
		}
	}
	live := d.Report()
	got := Replay(rec, t0, analyze.DefaultConfig())
	if a, b := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", live); a != b {
		t.Errorf("replay:\n%s\nlive:\n%s", a, b)
	}
	if got.Verdict != analyze.VerdictLeak || got.DetectedAtT != raised {
		t.Errorf("verdict %s detected at %v; the live monitor first saw a leak at %v", got.Verdict, got.DetectedAtT, raised)
	}
}

// Attempt keeps one attempt's samples, in order.
func TestAttempt(t *testing.T) {
	t0 := time.Unix(0, 0)
	var all []*timeline.Sample
	for i := range 9 {
		all = append(all, &timeline.Sample{Attempt: 1 + i%3, T: t0.Add(time.Duration(i) * time.Second)})
	}
	got := Attempt(all, 2)
	if len(got) != 3 || got[0].T != t0.Add(time.Second) || got[1].T != t0.Add(4*time.Second) || got[2].T != t0.Add(7*time.Second) {
		t.Errorf("attempt 2: %+v", got)
	}
	if len(Attempt(all, 4)) != 0 {
		t.Errorf("attempt 4 has samples")
	}
}
