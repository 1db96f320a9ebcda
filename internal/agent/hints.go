package agent

import (
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
)

// Hints is the attributor's OwnerHints for the agent: supervised runs come
// from the wrapped hints (the run store), PyTorch's allocator figures from
// the probes that reported to the agent. Safe for concurrent use.
type Hints struct {
	runs attrib.OwnerHints
	// stale is how long a probe's last sample counts.
	stale time.Duration
	now   func() time.Time

	mu     sync.Mutex
	probes map[int]*probeState
}

type probeState struct {
	alloc, reserved uint64
	has             bool
	t               time.Time
	ckpt            time.Time
	bye             bool
	steps           int64 // the newest step count the process reported
}

// NewHints wraps runs (nil: no supervised runs).
func NewHints(runs attrib.OwnerHints) *Hints {
	return &Hints{runs: runs, stale: 30 * time.Second, now: time.Now, probes: map[int]*probeState{}}
}

// RunForPID implements attrib.OwnerHints.
func (h *Hints) RunForPID(pid int) (string, string, bool) {
	if h.runs == nil {
		return "", "", false
	}
	return h.runs.RunForPID(pid)
}

// NotebookForKernel implements attrib.NotebookHints when the run hints do.
func (h *Hints) NotebookForKernel(kernelID string) (string, bool) {
	if nh, ok := h.runs.(attrib.NotebookHints); ok {
		return nh.NotebookForKernel(kernelID)
	}
	return "", false
}

// ProbeMemory implements attrib.ProbeHints.
func (h *Hints) ProbeMemory(pid int) (uint64, uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.probes[pid]
	if s == nil || !s.has || h.now().Sub(s.t) > h.stale {
		return 0, 0, false
	}
	return s.alloc, s.reserved, true
}

func (h *Hints) update(pid int, fn func(*probeState)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.probes[pid]
	if s == nil {
		s = &probeState{}
		h.probes[pid] = s
	}
	fn(s)
}

func (h *Hints) probe(pid int) (probeState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.probes[pid]
	if s == nil {
		return probeState{}, false
	}
	return *s, true
}

func (h *Hints) forget(pid int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.probes, pid)
}

var (
	_ attrib.OwnerHints = (*Hints)(nil)
	_ attrib.ProbeHints = (*Hints)(nil)
)
