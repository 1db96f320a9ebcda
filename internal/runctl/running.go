package runctl

import (
	"context"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/users"
)

// Running returns the supervised runs in progress as their own timelines
// record them (newest sample, the monitor's findings), read from the run
// store at most once a second; it implements sampler.RunSource. Runs whose
// supervisor is gone are left out.
func (h *Hints) Running(ctx context.Context) []timeline.RunState {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.runningAt) < time.Second && h.running != nil {
		return h.running
	}
	h.runningAt = time.Now()
	st, done, ok := h.open()
	if !ok {
		h.running = []timeline.RunState{}
		return h.running
	}
	defer done()
	out, err := RunningStates(ctx, st)
	if err != nil {
		return h.running
	}
	h.running = out
	return out
}

// RunningStates reads the state of every run in progress from st.
func RunningStates(ctx context.Context, st *store.Store) ([]timeline.RunState, error) {
	runs, err := st.Runs(ctx, 200)
	if err != nil {
		return nil, err
	}
	out := []timeline.RunState{}
	for _, r := range runs {
		if r.Status != store.StatusRunning || r.Attempts == 0 || !Alive(procfs.FS{}, r.SupervisorPID, r.SupervisorStart) {
			continue
		}
		rs := timeline.RunState{ID: r.ID, Name: r.Name, JobPID: r.JobPID, Attempt: r.Attempts, UID: users.NoUID}
		// the run's owner is its supervisor's user, as the kernel says
		if st, err := (procfs.FS{}).Status(r.SupervisorPID); err == nil {
			rs.UID = st.UID
		}
		if atts, err := st.Attempts(ctx, r.ID); err == nil && len(atts) > 0 {
			a := atts[len(atts)-1]
			rs.Attempt, rs.AttemptStart = a.N, a.StartedAt
		}
		if x, err := st.LatestSample(ctx, r.ID, rs.Attempt); err == nil {
			rs.Latest = x
		}
		if evs, err := st.AttemptEvents(ctx, r.ID, rs.Attempt, timeline.KindLeak, timeline.KindOOMForecast, timeline.KindVerdict); err == nil {
			for _, e := range evs {
				rs.Findings = append(rs.Findings, *e)
			}
		}
		out = append(out, rs)
	}
	return out, nil
}
