package runctl

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
)

// RunningStates: a run in progress with its current attempt's newest
// sample and findings; a finished run, one whose supervisor is gone and
// the findings of an earlier attempt are left out.
func TestRunningStates(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	me, err := procfs.FS{}.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.UnixMilli(time.Now().UnixMilli())
	runs := []struct {
		id, status string
		pid        int
		start      uint64
	}{
		{"live", store.StatusRunning, os.Getpid(), me.StartTicks},
		{"done", store.StatusFinished, os.Getpid(), me.StartTicks},
		{"gone", store.StatusRunning, os.Getpid(), me.StartTicks + 1}, // a reused pid
	}
	for _, r := range runs {
		if err := st.CreateRun(ctx, &store.Run{ID: r.id, Name: r.id + "-name", Status: r.status, StartedAt: t0, SupervisorPID: r.pid, SupervisorStart: r.start}); err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 2; n++ {
			if err := st.StartAttempt(ctx, &store.Attempt{RunID: r.id, N: n, StartedAt: t0.Add(time.Duration(n) * time.Minute)}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				x := &timeline.Sample{Attempt: n, T: t0.Add(time.Duration(n)*time.Minute + time.Duration(i)*time.Second), RSS: uint64(100*n + i), NProcs: 1}
				if err := st.AddSample(ctx, r.id, x); err != nil {
					t.Fatal(err)
				}
			}
			data, _ := json.Marshal(map[string]any{"verdict": "leak", "attempt": n})
			for _, k := range []string{timeline.KindLeak, timeline.KindUnsaved, timeline.KindOOMForecast} {
				if err := st.AddEvent(ctx, &store.Event{RunID: r.id, Attempt: n, T: t0.Add(time.Duration(n) * time.Minute), Kind: k, Data: data}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	got, err := RunningStates(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "live" || got[0].Name != "live-name" {
		t.Fatalf("running states %+v, want the live run alone", got)
	}
	r := got[0]
	if r.Attempt != 2 || !r.AttemptStart.Equal(t0.Add(2*time.Minute)) || r.Latest == nil || r.Latest.RSS != 202 {
		t.Errorf("attempt %d from %v, latest %+v: want attempt 2's newest sample", r.Attempt, r.AttemptStart, r.Latest)
	}
	if len(r.Findings) != 2 || r.Findings[0].Kind != timeline.KindLeak || r.Findings[1].Kind != timeline.KindOOMForecast || r.Findings[0].Attempt != 2 {
		t.Errorf("findings %+v: want attempt 2's leak and oom_forecast", r.Findings)
	}
}
