package agent

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/usage"
)

// TestReportEqualsTheSamples: the accounting of idleJobs' first N seconds
// equals sums computed here from the scenario the agent sampled once a
// second: ana's 20 GiB busy for the samples at 0..10 s, idle to 299 s and
// busy again from 300 s,
// ben's 10 GiB busy all along and 1 GiB with no utilisation reading (held,
// neither busy nor idle), and the death the test recorded on ben's job.
func TestReportEqualsTheSamples(t *testing.T) {
	const n = 600
	r := newRig(t, idleJobs, Config{})
	start := r.clk.Now()
	r.step(n)
	var benKey string
	for _, j := range r.ag.Snapshot().Jobs {
		if j.Name == "python3 train.py" {
			benKey = j.Key
		}
	}
	ctx := context.Background()
	if err := r.ag.AddEvent(ctx, &store.AgentEvent{JobKey: benKey, JobName: "python3 train.py", Kind: EventDied, T: start.Add(30 * time.Second),
		Message: "process python3 train.py died after a CUDA OOM"}); err != nil {
		t.Fatal(err)
	}
	hours := func(samples float64) float64 { return samples / 3600 } // one sample a second
	type want struct {
		jobs                  int
		mem, held, busy, idle float64
		peak                  int64
		died                  int
	}
	tests := []struct {
		by   string
		want map[string]want
	}{
		{usage.ByUser, map[string]want{
			"ana": {1, 20 * hours(n), hours(n), hours(11 + n - 300), hours(300 - 11), 20 << 30, 0},
			"ben": {2, 11 * hours(n), 2 * hours(n), hours(n), 0, 10 << 30, 1},
		}},
		{usage.ByJob, map[string]want{
			"python3 explore.py": {1, 20 * hours(n), hours(n), hours(11 + n - 300), hours(300 - 11), 20 << 30, 0},
			"python3 train.py":   {1, 10 * hours(n), hours(n), hours(n), 0, 10 << 30, 1},
			"python3 quiet.py":   {1, 1 * hours(n), hours(n), 0, 0, 1 << 30, 0},
		}},
		{usage.ByGPU, map[string]want{
			"0": {3, 31 * hours(n), 3 * hours(n), hours(n + 11 + n - 300), hours(300 - 11), 20 << 30, 1},
		}},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tt := range tests {
		t.Run(tt.by, func(t *testing.T) {
			rep, err := r.ag.Report(ctx, tt.by, start.Add(-time.Second), r.clk.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Rows) != len(tt.want) {
				b, _ := json.Marshal(rep.Rows)
				t.Fatalf("%d rows, want %d: %s", len(rep.Rows), len(tt.want), b)
			}
			var sum usage.Row
			for _, row := range rep.Rows {
				w, ok := tt.want[row.Group]
				if !ok {
					t.Fatalf("a row for %q", row.Group)
				}
				if row.Jobs != w.jobs || !near(row.MemoryGiBHours, w.mem) || !near(row.HeldHours, w.held) || !near(row.BusyHours, w.busy) ||
					!near(row.IdleHours, w.idle) || row.PeakBytes != w.peak || row.Died != w.died {
					t.Errorf("%s: %+v, want %+v", row.Group, row, w)
				}
				sum.MemoryGiBHours += row.MemoryGiBHours
				sum.Died += row.Died
			}
			if !near(rep.Total.MemoryGiBHours, sum.MemoryGiBHours) || rep.Total.Died != sum.Died {
				t.Errorf("total %+v, the rows add up to %+v", rep.Total, sum)
			}
		})
	}
	// over the API, the same figures
	code, body := r.do("GET", "/api/v1/report?by=user&range=1h", "", "")
	var rep usage.Report
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil || len(rep.Rows) != 2 || !near(rep.Total.MemoryGiBHours, 31*hours(n)) {
		t.Fatalf("GET /api/v1/report: %d %v %s", code, err, body)
	}
	if code, _ := r.do("GET", "/api/v1/report?by=pod", "", ""); code != 400 {
		t.Errorf("by=pod: %d, want 400", code)
	}
}
