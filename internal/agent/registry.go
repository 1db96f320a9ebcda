package agent

import (
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/sampler"
)

// ProbeRegistry is what the probes that report to the agent said of each
// process: PyTorch's allocator figures (it is the sampler's ProbeSource),
// steps, checkpoints, goodbyes. Safe for concurrent use.
type ProbeRegistry struct {
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

// NewProbeRegistry returns an empty registry.
func NewProbeRegistry() *ProbeRegistry {
	return &ProbeRegistry{stale: 30 * time.Second, now: time.Now, probes: map[int]*probeState{}}
}

// ProbeMemory implements sampler.ProbeSource: the figures of pid's newest
// sample, while it is fresh.
func (h *ProbeRegistry) ProbeMemory(pid int) (uint64, uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.probes[pid]
	if s == nil || !s.has || h.now().Sub(s.t) > h.stale {
		return 0, 0, false
	}
	return s.alloc, s.reserved, true
}

func (h *ProbeRegistry) update(pid int, fn func(*probeState)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.probes[pid]
	if s == nil {
		s = &probeState{}
		h.probes[pid] = s
	}
	fn(s)
}

func (h *ProbeRegistry) probe(pid int) (probeState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.probes[pid]
	if s == nil {
		return probeState{}, false
	}
	return *s, true
}

func (h *ProbeRegistry) forget(pid int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.probes, pid)
}

var _ sampler.ProbeSource = (*ProbeRegistry)(nil)
