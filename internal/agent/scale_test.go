package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// dayOfFiftyJobsBound is the disk bound docs/SERVE.md and docs/PERFORMANCE.md
// state for a day of 1 Hz samples of 50 jobs (with the default 1-minute
// coarse tier): the database file and its WAL together.
const dayOfFiftyJobsBound = 32 << 20

// TestDayOfFiftyJobsFitsDiskBound writes 24 h of 1 Hz samples for 50 jobs
// through the timeline layer and checks the state directory's size, and
// that both resolutions read back whole.
func TestDayOfFiftyJobsFitsDiskBound(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	st := testbin.OpenStore(t, home)
	end := time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC)
	ret := Retention{}
	if err := Synthesize(ctx, st, ret, 50, 24*time.Hour, end); err != nil {
		t.Fatal(err)
	}
	tl := NewTimelines(st, ret)
	jobs, err := st.AgentJobs(ctx, end.Add(-time.Hour))
	if err != nil || len(jobs) != 50 {
		t.Fatalf("%d jobs, %v", len(jobs), err)
	}
	fine, res, err := tl.Query(ctx, jobs[0].ID, end.Add(-time.Hour), end, 0)
	if err != nil || res != ResFine || len(fine) != 3601 {
		t.Fatalf("last hour: %d points at res %d, %v (want 3601 fine)", len(fine), res, err)
	}
	coarse, res, err := tl.Query(ctx, jobs[0].ID, end.Add(-24*time.Hour), end, 0)
	if err != nil || res != ResCoarse || len(coarse) < 1440 {
		t.Fatalf("day: %d points at res %d, %v (want 1440+ coarse)", len(coarse), res, err)
	}
	payload, _ := tl.payload(ctx)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, f := range []string{"vramguard.db", "vramguard.db-wal"} {
		if fi, err := os.Stat(home + "/" + f); err == nil {
			size += fi.Size()
		}
	}
	t.Logf("24 h x 50 jobs at 1 Hz: %d samples, block payload %.1f MiB, on disk %.1f MiB (bound %d MiB)",
		50*86401, float64(payload)/(1<<20), float64(size)/(1<<20), dayOfFiftyJobsBound>>20)
	if size > dayOfFiftyJobsBound {
		t.Fatalf("a day of 50 jobs takes %d bytes, bound %d", size, dayOfFiftyJobsBound)
	}
}
