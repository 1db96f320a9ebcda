package probe

import (
	"slices"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Hook plugs the probe into `vramguard run` (it implements supervise.Probe;
// cli asserts it): it puts the probe into each attempt's environment, reads
// the Listener, reports training progress for stall detection and PyTorch's
// allocator figures for the job's timeline, and adds the probe section (and,
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
	cuda     map[int][]DeviceStats // the newest CUDA figures of each open process
	progress time.Time
	lastCkpt time.Time
	closed   bool
	// procs is what each process of the attempt reported of itself
	procs map[int]*procView
	// events are the timeline events the probe's messages make (a
	// notebook's cells, its autosaves) that Events has not handed out yet
	events []timeline.Event
	// shutdown is the attempt's kernel_shutdown message, if one came
	shutdown *Message
}

// procView is one process as its probe reported it.
type procView struct {
	steps    int64
	lastStep time.Time
	peakRSS  int64
	// peakGPU is the process's PyTorch reserved peak, summed over its
	// devices (the newest report of each)
	gpuPeaks map[int]int64
	forked   bool
	argv     []string
	dist     *ranks.Identity
	exc      *ranks.Report
	ended    time.Time
}

// NewHook reads l until it is closed. probeDir is what Install returned; o
// is used for every attempt (Attempt is set per attempt). now stamps
// progress; nil means time.Now.
func NewHook(probeDir string, l *Listener, o Options, now func() time.Time) *Hook {
	if now == nil {
		now = time.Now
	}
	h := &Hook{dir: probeDir, opts: o, now: now, open: map[int]bool{}, steps: map[int]int64{}, cuda: map[int][]DeviceStats{}, procs: map[int]*procView{}}
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
	h.view(m)
	switch m.Type {
	case TypeHello:
		h.open[m.PID] = true
	case TypeDisconnect:
		delete(h.open, m.PID)
		delete(h.cuda, m.PID)
		return
	case TypeInvalid:
		return
	}
	h.seen = true
	h.sum.Add(m)
	if m.Type == TypeSample {
		if len(m.CUDA) > 0 {
			h.cuda[m.PID] = m.CUDA
		} else {
			delete(h.cuda, m.PID)
		}
	}
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
	if m.Type == TypeKernelShutdown && h.shutdown == nil {
		c := m
		h.shutdown = &c
	}
	if e, ok := event(m); ok {
		h.events = append(h.events, e)
	}
}

// Events hands out, once each, the timeline events the probe's messages
// made since the last call: a notebook kernel's cells (cell_start, cell)
// and its autosaves (checkpoint). Other saves are in the post-mortem's
// probe section already; the autosave events are what a notebook's next
// kernel looks its newest autosave up by.
func (h *Hook) Events() []timeline.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.events
	h.events = nil
	return out
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
		h.events = nil
		h.sum = Summary{}
		h.seen = false
		h.steps = map[int]int64{}
		h.cuda = map[int][]DeviceStats{}
		h.procs = map[int]*procView{}
		h.shutdown = nil
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

// FillSample adds PyTorch's own figures to a sample of the job: allocated,
// reserved, inactive split bytes and allocation retries, each summed over
// the job's probed processes and their devices (their newest report), and
// the newest optimizer step any process counted; and, when the sample has
// no device total from NVML, the total of the devices the job uses as torch
// reports it. Figures stay nil when no process reports CUDA statistics.
func (h *Hook) FillSample(s *timeline.Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var al, re, is, rt uint64
	n := 0
	totals := map[int]uint64{} // device -> its total memory, as torch.cuda.mem_get_info saw it
	for _, devs := range h.cuda {
		for _, d := range devs {
			al += uint64(max(d.AllocatedBytes, 0))
			re += uint64(max(d.ReservedBytes, 0))
			is += uint64(max(d.InactiveSplitBytes, 0))
			rt += uint64(max(d.NumAllocRetries, 0))
			if d.TotalBytes != nil && *d.TotalBytes > 0 {
				totals[d.Device] = max(totals[d.Device], uint64(*d.TotalBytes))
			}
			n++
		}
	}
	if n > 0 {
		s.Allocated, s.Reserved, s.InactiveSplit, s.AllocRetries = timeline.U(al), timeline.U(re), timeline.U(is), timeline.U(rt)
	}
	if s.GPUTotal == nil && len(totals) > 0 {
		// no NVML reading of the devices: the probe's own
		var t uint64
		for _, v := range totals {
			t += v
		}
		s.GPUTotal = &t
	}
	var step int64 = -1
	for _, v := range h.steps {
		step = max(step, v)
	}
	if step >= 0 {
		s.Step = &step
	}
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

// drain waits (at most drainTimeout) for the attempt's probe connections
// to close, so that every message its processes sent has been read, and
// returns with h.mu held.
func (h *Hook) drain() {
	deadline := time.Now().Add(drainTimeout)
	timer := time.AfterFunc(drainTimeout, h.cond.Broadcast)
	defer timer.Stop()
	h.mu.Lock()
	for len(h.open) > 0 && !h.closed && time.Now().Before(deadline) {
		h.cond.Wait()
	}
}

// KernelShutdown tells whether a notebook kernel's client asked the kernel
// of the attempt that just ended to shut down (asked) and whether to
// restart it (restart), from the probe's kernel_shutdown message. It waits,
// as Finish does, for the attempt's connections to close. It implements
// supervise.KernelShutdowns.
func (h *Hook) KernelShutdown() (asked, restart bool) {
	h.drain()
	defer h.mu.Unlock()
	if h.shutdown == nil {
		return false, false
	}
	return true, h.shutdown.Restart
}

// Finish waits (at most drainTimeout) for the attempt's probe connections to
// close, then sets pm.Probe and, after a CUDA OOM with a snapshot,
// pm.AllocationSites (the ten largest sites).
func (h *Hook) Finish(pm *postmortem.Postmortem) {
	h.drain()
	seen, sum := h.seen, h.sum
	h.mu.Unlock()
	if !seen {
		return
	}
	p := sum.Probe
	pm.Probe = &p
	if sum.OOM != nil && sum.OOM.SnapshotPath != "" {
		sites, err := TopAllocationSites(sum.OOM.SnapshotPath, 10)
		if err != nil {
			pm.AllocationSitesError = err.Error()
		} else {
			pm.AllocationSites = sites
		}
	}
}

// view folds a message into its process's view.
func (h *Hook) view(m Message) {
	if m.PID == 0 || m.Type == TypeInvalid {
		return
	}
	v := h.procs[m.PID]
	if v == nil {
		if m.Type == TypeDisconnect {
			return
		}
		v = &procView{}
		h.procs[m.PID] = v
	}
	now := h.now()
	switch m.Type {
	case TypeHello:
		v.forked, v.argv = m.Forked, m.Argv
	case TypeSample, TypeCkpt, TypeBye:
		if s := m.OptimizerSteps; s > v.steps {
			v.steps, v.lastStep = s, now
		}
		v.peakRSS = max(v.peakRSS, m.RSSBytes)
		for _, d := range m.CUDA {
			if v.gpuPeaks == nil {
				v.gpuPeaks = map[int]int64{}
			}
			v.gpuPeaks[d.Device] = max(v.gpuPeaks[d.Device], d.ReservedPeakBytes)
		}
	case TypeDist:
		if m.Rank != nil && *m.Rank >= 0 && !v.forked {
			v.dist = &ranks.Identity{Rank: *m.Rank, WorldSize: m.WorldSize, LocalRank: m.LocalRank, Source: ranks.SourceTorch}
		}
	case TypeException:
		text := m.ExcType
		if m.Text != "" {
			text += ": " + m.Text
		}
		v.exc = &ranks.Report{Text: text, T: m.Time(), From: "the probe, which saw it uncaught"}
	case TypeDisconnect:
		v.ended = now
	}
}

// Processes returns what each probed process of the attempt reported of
// itself: its optimizer steps and when they last rose, its largest RSS and
// PyTorch's reserved peak, its rank once torch.distributed's process group
// existed, the uncaught exception that ended it, and when its connection
// closed (its end, for a process that did not hand its socket on).
func (h *Hook) Processes() []ranks.Probed {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ranks.Probed, 0, len(h.procs))
	for pid, v := range h.procs {
		p := ranks.Probed{PID: pid, Argv: v.argv, Steps: v.steps, LastStep: v.lastStep, PeakRSS: uint64(max(v.peakRSS, 0)), Dist: v.dist, Exception: v.exc, Ended: v.ended}
		if len(v.gpuPeaks) > 0 {
			var g uint64
			for _, b := range v.gpuPeaks {
				g += uint64(max(b, 0))
			}
			p.PeakGPU = &g
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b ranks.Probed) int { return a.PID - b.PID })
	return out
}
