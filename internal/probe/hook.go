package probe

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/supervise"
)

// Hook plugs the probe into `vramguard run` (supervise.Hook): it puts the
// probe into each attempt's environment, reads the Listener, reports
// training progress for stall detection, and adds the "probe" object (and,
// after a CUDA OOM with a snapshot, the largest allocation sites) to the
// post-mortem.
type Hook struct {
	dir  string
	opts Options
	now  func() time.Time

	mu       sync.Mutex
	cond     *sync.Cond
	attempt  int
	sum      Summary
	seen     bool
	open     map[int]bool // pids whose connection is open
	steps    map[int]int64
	progress time.Time
	lastCkpt time.Time
	closed   bool
}

var _ supervise.Hook = (*Hook)(nil)

// NewHook reads l until it is closed. probeDir is what Install returned; o
// is used for every attempt (Attempt is set per attempt). now stamps
// progress; nil means time.Now.
func NewHook(probeDir string, l *Listener, o Options, now func() time.Time) *Hook {
	if now == nil {
		now = time.Now
	}
	h := &Hook{dir: probeDir, opts: o, now: now, open: map[int]bool{}, steps: map[int]int64{}}
	h.cond = sync.NewCond(&h.mu)
	go h.read(l.Messages())
	return h
}

func (h *Hook) read(msgs <-chan Message) {
	for m := range msgs {
		h.mu.Lock()
		h.add(m)
		h.mu.Unlock()
		h.cond.Broadcast()
	}
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cond.Broadcast()
}

func (h *Hook) add(m Message) {
	switch m.Type {
	case TypeHello:
		h.open[m.PID] = true
	case TypeDisconnect:
		delete(h.open, m.PID)
		return
	case TypeInvalid:
		return
	}
	h.seen = true
	h.sum.Add(m)
	now := h.now()
	if m.Type == TypeSample || m.Type == TypeCkpt || m.Type == TypeBye {
		if s := m.OptimizerSteps + m.UserSteps; s > h.steps[m.PID] {
			h.steps[m.PID] = s
			h.progress = now
		}
	}
	if m.Type == TypeCkpt && m.Error == "" {
		h.lastCkpt = now
		h.progress = now
	}
}

// Env adds the probe to an attempt's environment.
func (h *Hook) Env(env []string, attempt int) []string {
	o := h.opts
	o.Attempt = attempt
	return Env(env, h.dir, o)
}

// Started begins a new attempt's summary.
func (h *Hook) Started(attempt, pid int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if attempt != h.attempt {
		h.attempt = attempt
		h.sum = Summary{}
		h.seen = false
		h.steps = map[int]int64{}
	}
}

// Progress is when a probed process last counted a training step or saved
// a checkpoint (zero before any).
func (h *Hook) Progress() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.progress
}

// LastCheckpoint is when the last successful torch.save was reported, for
// --unsaved-warning; ok is false before the first.
func (h *Hook) LastCheckpoint() (t time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastCkpt, !h.lastCkpt.IsZero()
}

// PIDs lists the probed processes whose connection is open now: where to
// send StackSignal (a process without the probe would die of it).
func (h *Hook) PIDs() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]int, 0, len(h.open))
	for p := range h.open {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Summary returns a copy of the current attempt's summary.
func (h *Hook) Summary() Summary {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sum
	return s
}

// drainTimeout bounds how long Finish waits for the connections of an
// attempt's processes to close after the attempt ended.
const drainTimeout = 2 * time.Second

// Finish waits (at most drainTimeout) for the attempt's probe connections to
// close, then sets pm.Probe and, after a CUDA OOM with a snapshot,
// pm.Extra["oom_allocation_sites"] (the ten largest sites).
func (h *Hook) Finish(pm *supervise.Postmortem) {
	deadline := time.Now().Add(drainTimeout)
	timer := time.AfterFunc(drainTimeout, h.cond.Broadcast)
	defer timer.Stop()
	h.mu.Lock()
	for len(h.open) > 0 && !h.closed && time.Now().Before(deadline) {
		h.cond.Wait()
	}
	seen, sum := h.seen, h.sum
	h.mu.Unlock()
	if !seen {
		return
	}
	if b, err := json.Marshal(sum); err == nil {
		pm.Probe = b
	}
	if sum.OOM != nil && sum.OOM.SnapshotPath != "" {
		sites, err := TopAllocationSites(sum.OOM.SnapshotPath, 10)
		var v any = sites
		if err != nil {
			v = map[string]string{"error": err.Error()}
		}
		if b, err := json.Marshal(v); err == nil {
			if pm.Extra == nil {
				pm.Extra = map[string]json.RawMessage{}
			}
			pm.Extra["oom_allocation_sites"] = b
		}
	}
}
