package cli

import (
	"context"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/store"
)

// runHints tells attribution which PIDs are the jobs of supervised runs,
// reading the run store at most every few seconds.
type runHints struct {
	f       *Factory
	mu      sync.Mutex
	loaded  time.Time
	byPID   map[int]*store.Run
	refresh time.Duration
}

// runOwnerHints returns hints backed by the run store.
func runOwnerHints(f *Factory) attrib.OwnerHints {
	return &runHints{f: f, refresh: 3 * time.Second}
}

func (h *runHints) RunForPID(pid int) (string, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.loaded) > h.refresh {
		h.load()
	}
	r, ok := h.byPID[pid]
	if !ok {
		return "", "", false
	}
	return r.ID, r.Name, true
}

func (h *runHints) load() {
	h.loaded = time.Now()
	ctx := context.Background()
	st, err := store.Open(h.f.Home())
	if err != nil {
		return
	}
	defer st.Close()
	runs, err := st.Runs(ctx, 200)
	if err != nil {
		return
	}
	h.byPID = map[int]*store.Run{}
	for _, r := range runs {
		if r.Status == store.StatusRunning && r.JobPID > 0 {
			h.byPID[r.JobPID] = r
		}
	}
}
