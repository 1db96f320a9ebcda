package e2e

import (
	"context"
	"encoding/json"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/analyze/trace"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/timeline"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// shape gives a job's memory at t seconds from its attempt's start; it may
// keep state between calls (they come in time order).
type shape func(t float64, rng *rand.Rand) store.Sample

// gpuJob is a training job with the probe: 4 GiB of weights and optimizer
// state, activations of up to 3 GiB sampled at random phases of the step, a
// caching allocator that keeps its peak, 500 MiB of CUDA context on a
// 24 GiB device. From leakFrom on, allocated grows by rate bytes/s. The
// probe reports from the tenth sample on (torch is still being imported
// before), so the first rows have no allocator figures.
func gpuJob(rate, leakFrom float64) shape {
	var peak uint64
	n := 0
	return func(t float64, rng *rand.Rand) store.Sample {
		n++
		alloc := 4*gib + rng.Float64()*3*gib
		if t > leakFrom {
			alloc += rate * (t - leakFrom)
		}
		a := uint64(alloc)
		if r := (a + 20*mib - 1) / (20 * mib) * 20 * mib; r > peak {
			peak = r
		}
		s := store.Sample{RSS: uint64(3*gib + rng.Intn(20*mib)), NProcs: 3, Limit: 64 * gib, LimitSource: "host",
			GPUUsed: timeline.U(peak + 500*mib), GPUTotal: timeline.U(24 * gib), CPUTicks: uint64(t * 100)}
		if n > 10 {
			step := int64(t / 0.7)
			s.Allocated, s.Reserved, s.Step = timeline.U(a), timeline.U(peak), &step
			s.InactiveSplit, s.AllocRetries = timeline.U(uint64(rng.Intn(64*mib))), timeline.U(0)
		}
		return s
	}
}

// hostJob has no GPU: its resident set grows by rate bytes/s from 1 GiB
// under a 16 GiB cgroup limit.
func hostJob(rate float64) shape {
	return func(t float64, rng *rand.Rand) store.Sample {
		rss := uint64(gib + rate*t + float64(rng.Intn(20*mib)))
		return store.Sample{RSS: rss, PSS: timeline.U(rss * 9 / 10), NProcs: 2, Limit: 16 * gib, LimitSource: "cgroup",
			CgroupUsage: timeline.U(rss + 200*mib), CgroupLimit: timeline.U(16 * gib), CPUTicks: uint64(t * 100)}
	}
}

// recordRun writes a finished run straight into the store of e, an attempt
// per shape, each sampled every second (with jitter) for dur; every attempt
// gets one event. It returns the run's id and how many samples each
// attempt has.
func (e *env) recordRun(name string, dur time.Duration, shapes ...shape) (string, []int) {
	e.t.Helper()
	ctx := context.Background()
	st := testbin.OpenStore(e.t, e.home)
	defer st.Close()
	rng := rand.New(rand.NewSource(int64(len(name))))
	start := time.Now().Truncate(time.Millisecond) // the newest run is the one recorded last
	id := start.UTC().Format("20060102-150405") + "-" + name
	r := &store.Run{ID: id, Name: name, Command: []string{"python", "train.py"}, Status: store.StatusRunning, StartedAt: start}
	if err := st.CreateRun(ctx, r); err != nil {
		e.t.Fatal(err)
	}
	var counts []int
	t0 := start
	for i, sh := range shapes {
		n := i + 1
		if err := st.StartAttempt(ctx, &store.Attempt{RunID: id, N: n, StartedAt: t0}); err != nil {
			e.t.Fatal(err)
		}
		if err := st.AddEvent(ctx, &store.Event{RunID: id, Attempt: n, T: t0, Kind: timeline.KindStart, Message: "attempt " + strconv.Itoa(n)}); err != nil {
			e.t.Fatal(err)
		}
		count := 0
		for off := 700 * time.Millisecond; off < dur; off += time.Second + time.Duration(rng.Intn(200)-100)*time.Millisecond {
			s := sh(off.Truncate(time.Millisecond).Seconds(), rng)
			s.Attempt, s.T = n, t0.Add(off).Truncate(time.Millisecond)
			if err := st.AddSample(ctx, id, &s); err != nil {
				e.t.Fatal(err)
			}
			count++
		}
		end := t0.Add(dur)
		if err := st.FinishAttempt(ctx, id, n, end, 0, "success", nil); err != nil {
			e.t.Fatal(err)
		}
		counts = append(counts, count)
		t0 = end.Add(time.Minute)
	}
	if err := st.FinishRun(ctx, id, store.StatusFinished, "success", 0, t0, nil); err != nil {
		e.t.Fatal(err)
	}
	return id, counts
}

// analyzeJSON runs `analyze --json` with args and decodes the object.
func (e *env) analyzeJSON(args ...string) map[string]any {
	e.t.Helper()
	r := e.run(append([]string{"analyze", "--json"}, args...)...)
	if r.code != 0 {
		e.t.Fatalf("analyze %v: exit %d: %s", args, r.code, r.stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		e.t.Fatalf("analyze %v: not one JSON object: %v\n%s", args, err, r.stdout)
	}
	return m
}

// roundTrip checks acceptance item 5 of "recorded runs are data": the
// analysis of a recorded attempt (`analyze RUN`) and of its export
// (`runs export RUN --format csv`, then `analyze FILE.csv`) are the same
// report, every field of it. It returns the report and the CSV's lines.
func (e *env) roundTrip(ref string, attempt, wantAttempt, wantSamples int) (map[string]any, []string) {
	e.t.Helper()
	var sel []string
	if attempt > 0 {
		sel = []string{"--attempt", strconv.Itoa(attempt)}
	}
	fromRun := e.analyzeJSON(append([]string{ref}, sel...)...)
	csv := filepath.Join(e.t.TempDir(), "export.csv")
	if r := e.run(append([]string{"runs", "export", ref, "--format", "csv", "-o", csv}, sel...)...); r.code != 0 || r.stdout != "" {
		e.t.Fatalf("runs export: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	fromCSV := e.analyzeJSON(csv)
	if fromRun["attempt"] != float64(wantAttempt) || fromRun["run_id"] == nil {
		e.t.Errorf("analyze %s: run_id %v attempt %v, want attempt %d", ref, fromRun["run_id"], fromRun["attempt"], wantAttempt)
	}
	if fromRun["samples"] != float64(wantSamples) {
		e.t.Errorf("analyze %s: %v samples, want the attempt's %d", ref, fromRun["samples"], wantSamples)
	}
	if _, ok := fromCSV["run_id"]; ok {
		e.t.Errorf("analyze of a CSV names a run: %v", fromCSV["run_id"])
	}
	// the monitor's replay is analyze RUN's alone (it needs the attempt's
	// start); a leak's detection agrees with the detector's
	mon, ok := fromRun["monitor"].(map[string]any)
	if !ok {
		e.t.Errorf("analyze %s --json has no monitor object", ref)
	} else if fromRun["verdict"] == "leak" {
		leak, _ := mon["leak"].(map[string]any)
		if leak == nil || math.Abs(leak["detected_at_s"].(float64)-fromRun["detected_at_t"].(float64)) > 0.1 {
			e.t.Errorf("analyze %s: monitor's leak %v, detector raised it at %v", ref, leak, fromRun["detected_at_t"])
		}
	}
	delete(fromRun, "run_id")
	delete(fromRun, "attempt")
	delete(fromRun, "monitor")
	if !reflect.DeepEqual(fromRun, fromCSV) {
		a, _ := json.MarshalIndent(fromRun, "", " ")
		b, _ := json.MarshalIndent(fromCSV, "", " ")
		e.t.Errorf("analyze %s and analyze of its export differ:\nRUN: %s\nCSV: %s", ref, a, b)
	}
	body, err := os.ReadFile(csv)
	if err != nil {
		e.t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if want := trace.Header + "," + strings.Join(trace.Extras, ","); lines[0] != want {
		e.t.Errorf("CSV header %q, want %q", lines[0], want)
	}
	if len(lines)-1 != wantSamples {
		e.t.Errorf("CSV has %d rows, want %d", len(lines)-1, wantSamples)
	}
	return fromRun, lines
}

// cells is a CSV row by column name.
func cells(header, row string) map[string]string {
	m := map[string]string{}
	h, c := strings.Split(header, ","), strings.Split(row, ",")
	for i := range h {
		if i < len(c) {
			m[h[i]] = c[i]
		}
	}
	return m
}

// A recorded run is data: `analyze RUN` replays an attempt's samples
// through the detector, `runs export` writes them as a trace CSV, and
// analyzing the CSV concludes the same, leak start, detection time and
// forecast included.
func TestAnalyzeRecordedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leak, leakN := e.recordRun("leak", 15*time.Minute, gpuJob(3*mib, 300))
	steady, steadyN := e.recordRun("steady", 15*time.Minute, gpuJob(0, 0))
	host, hostN := e.recordRun("host", 15*time.Minute, hostJob(4*mib))
	// attempt 1 was steady, attempt 2 (the last) leaked from 300s after its
	// own start
	two, twoN := e.recordRun("two", 15*time.Minute, gpuJob(0, 0), gpuJob(3*mib, 300))

	cases := []struct {
		name        string
		ref         string
		attempt     int // --attempt; 0: none
		wantAttempt int
		samples     int
		verdict     string
		series      string
		leakFrom    float64 // the true leak start, for a leak
		check       func(t *testing.T, first, last map[string]string)
	}{
		{name: "gpu leak from t=300s", ref: "leak", wantAttempt: 1, samples: leakN[0], verdict: "leak", series: "allocated", leakFrom: 300,
			check: func(t *testing.T, first, last map[string]string) {
				// the probe had not reported yet: empty cells, not zeros
				if first["allocated"] != "" || first["reserved"] != "" || first["step"] != "" || first["used"] == "" {
					t.Errorf("first row %v: want empty allocator cells and NVML used", first)
				}
				if first["t"] != "0.7" || first["total"] != strconv.Itoa(24*gib) || first["limit"] != strconv.Itoa(64*gib) {
					t.Errorf("first row %v: want t=0.7 (seconds from the attempt's start), total 24 GiB, limit 64 GiB", first)
				}
				if last["allocated"] == "" || last["step"] == "" || last["pss"] != "" || last["cgroup_usage"] != "" {
					t.Errorf("last row %v: want allocator figures, no pss or cgroup usage", last)
				}
			}},
		{name: "steady gpu job", ref: steady, wantAttempt: 1, samples: steadyN[0], verdict: "stable", series: "allocated"},
		{name: "host memory leak", ref: host, wantAttempt: 1, samples: hostN[0], verdict: "leak", series: "rss", leakFrom: 0,
			check: func(t *testing.T, first, last map[string]string) {
				if first["used"] != "" || first["allocated"] != "" || first["limit"] != strconv.Itoa(16*gib) ||
					first["pss"] == "" || first["cgroup_usage"] == "" {
					t.Errorf("first row %v: want no GPU figures, the 16 GiB limit, pss and cgroup usage", first)
				}
			}},
		{name: "last attempt by default", ref: two, wantAttempt: 2, samples: twoN[1], verdict: "leak", series: "allocated", leakFrom: 300},
		{name: "--attempt 1", ref: "two", attempt: 1, wantAttempt: 1, samples: twoN[0], verdict: "stable", series: "allocated"},
		{name: "last", ref: "last", wantAttempt: 2, samples: twoN[1], verdict: "leak", series: "allocated", leakFrom: 300},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &env{t: t, home: e.home}
			rep, lines := e.roundTrip(c.ref, c.attempt, c.wantAttempt, c.samples)
			if rep["verdict"] != c.verdict || rep["series"] != c.series {
				t.Fatalf("verdict %v on %v, want %s on %s; evidence %v", rep["verdict"], rep["series"], c.verdict, c.series, rep["evidence"])
			}
			if c.verdict == "leak" {
				start, _ := rep["leak_start_t"].(float64)
				if start < c.leakFrom-60 || start > c.leakFrom+120 {
					t.Errorf("leak_start_t %v, want near %v", rep["leak_start_t"], c.leakFrom)
				}
				if rep["oom_eta_s"] == nil {
					t.Errorf("a leak with no OOM forecast")
				}
			}
			if c.check != nil {
				c.check(t, cells(lines[0], lines[1]), cells(lines[0], lines[len(lines)-1]))
			}
		})
	}

	t.Run("text", func(t *testing.T) {
		r := e.run("analyze", "leak")
		for _, want := range []string{"run " + leak + " (leak) attempt 1: LEAK", "GiB", "since     t=", "from the attempt's start"} {
			if r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Errorf("analyze leak: exit %d, output lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
			}
		}
	})

	t.Run("json export", func(t *testing.T) {
		r := e.run("runs", "export", two, "--attempt", "1", "--format", "json")
		var doc struct {
			RunID   string `json:"run_id"`
			Attempt int    `json:"attempt"`
			Samples []struct {
				TS float64 `json:"t_s"`
				timeline.Sample
			} `json:"samples"`
			Events []timeline.Event `json:"events"`
		}
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
			t.Fatalf("not one JSON object: %v", err)
		}
		if doc.RunID != two || doc.Attempt != 1 || len(doc.Samples) != twoN[0] {
			t.Fatalf("run %q attempt %d with %d samples, want %s 1 with %d", doc.RunID, doc.Attempt, len(doc.Samples), two, twoN[0])
		}
		if len(doc.Events) != 1 || doc.Events[0].Message != "attempt 1" {
			t.Errorf("events %+v, want attempt 1's only", doc.Events)
		}
		s := doc.Samples[len(doc.Samples)-1]
		if s.Attempt != 1 || s.Allocated == nil || s.GPUTotal == nil || *s.GPUTotal != 24*gib || s.Step == nil || s.TS < 890 || s.TS > 900 ||
			*s.Allocated > 8*gib {
			t.Errorf("last sample %+v (t_s %v): want attempt 1's (no leak), with allocator figures, at ~900s", s.Sample, s.TS)
		}
		if s0 := doc.Samples[0]; s0.TS != 0.7 || s0.Allocated != nil {
			t.Errorf("first sample at t_s %v with allocated %v, want 0.7 and none", s0.TS, s0.Allocated)
		}
	})
}

// A run recorded from a real job (its RSS grows by 4 MiB every 0.1 s)
// exports and analyzes end to end, to the same report both ways; the export
// carries the growth it recorded.
func TestAnalyzeRealRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := "import time\nkeep = []\nfor i in range(40):\n    keep.append(bytearray(4 << 20)); time.sleep(0.1)\n"
	if r := e.run("run", "--sample-interval", "100ms", "--name", "grow", "--", python, "-c", job); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	var exp struct {
		Samples []json.RawMessage `json:"samples"`
	}
	r := e.run("runs", "export", "grow", "--format", "json")
	if err := json.Unmarshal([]byte(r.stdout), &exp); err != nil || r.code != 0 {
		t.Fatalf("export json: exit %d, %v: %s", r.code, err, r.stderr)
	}
	if len(exp.Samples) < 10 {
		t.Fatalf("%d samples recorded in 4s at 100ms", len(exp.Samples))
	}
	rep, lines := e.roundTrip("grow", 0, 1, len(exp.Samples))
	t.Logf("verdict %v over %v samples", rep["verdict"], rep["samples"])
	// the job's resident set rises by 160 MiB (at its exit the tree may be
	// gone: the peak, not the last row)
	first := cells(lines[0], lines[1])
	r0, _ := strconv.ParseFloat(first["rss"], 64)
	t0, _ := strconv.ParseFloat(first["t"], 64)
	peak, peakT := 0.0, ""
	for _, l := range lines[1:] {
		c := cells(lines[0], l)
		if v, err := strconv.ParseFloat(c["rss"], 64); err == nil && v > peak {
			peak, peakT = v, c["t"]
		}
	}
	if peak-r0 < 100*mib || t0 < 0 || t0 > 2 {
		t.Errorf("rss %s at t=%s, peak %.0f at t=%s: want a rise of 160 MiB from the attempt's start", first["rss"], first["t"], peak, peakT)
	}
}
