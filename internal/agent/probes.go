// The messages of the probes connected to the agent's socket: each one about its own
// process only, and the events it makes of that process's job.

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/store"
)

// followProbes reads probe messages. A message about another PID than the
// connection's peer is refused: a probe may report only about itself.
func (a *Agent) followProbes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-a.cfg.Probes:
			if !ok {
				return
			}
			a.probeMessage(ctx, m)
		}
	}
}

func (a *Agent) probeMessage(ctx context.Context, m probe.Message) {
	if m.Type == probe.TypeInvalid || (m.PID != 0 && m.PID != m.PeerPID) || m.PeerPID == 0 {
		a.mu.Lock()
		a.probeRej++
		a.mu.Unlock()
		a.log.Warn("probe message refused", "type", m.Type, "pid", m.PID, "peer_pid", m.PeerPID)
		return
	}
	a.mu.Lock()
	a.probeMsgs++
	a.mu.Unlock()
	pid := m.PeerPID
	now := a.cfg.Now()
	switch m.Type {
	case probe.TypeSample:
		var alloc, res int64
		for _, d := range m.CUDA {
			alloc += d.AllocatedBytes
			res += d.ReservedBytes
		}
		progressed := false
		a.cfg.Registry.update(pid, func(s *probeState) {
			s.alloc, s.reserved, s.has, s.t = uint64(alloc), uint64(res), len(m.CUDA) > 0, now
			if st := m.OptimizerSteps + m.UserSteps; st > s.steps {
				s.steps, progressed = st, true
			}
		})
		if progressed {
			a.withJobOf(pid, func(js *jobState) { js.rules.Progress(now) })
		}
	case probe.TypeHello, probe.TypeTorch:
		a.cfg.Registry.update(pid, func(s *probeState) { s.t = now })
	case probe.TypeBye:
		a.cfg.Registry.update(pid, func(s *probeState) { s.bye = true })
		a.withJobOf(pid, func(js *jobState) { js.ProbeBye = true })
	case probe.TypeDisconnect:
		a.cfg.Registry.forget(pid)
	case probe.TypeCkpt:
		if m.OK != nil && !*m.OK {
			return
		}
		a.cfg.Registry.update(pid, func(s *probeState) { s.ckpt = now })
		var e *store.AgentEvent
		a.withJobOf(pid, func(js *jobState) {
			js.LastCkpt = now
			js.rules.Checkpoint(now)
			msg := fmt.Sprintf("%s saved %s", js.Job.Name, m.Path)
			data := map[string]any{"path": m.Path, "pid": pid}
			if m.Bytes != nil {
				data["bytes"] = *m.Bytes
			}
			e = a.jobEvent(&js.Job, now, EventCheckpoint, msg, data)
		})
		if e != nil {
			a.emit(ctx, []*store.AgentEvent{e})
		}
	case probe.TypeCell:
		// A notebook kernel's cell ended: the dashboard marks its span on
		// the kernel's plot (data: timeline.CellData, start and end).
		a.jobEventSoon(ctx, pid, func(js *jobState) *store.AgentEvent {
			d := probe.CellData(m)
			raw, _ := json.Marshal(d)
			return a.jobEventRaw(&js.Job, now, EventCell, js.Job.Name+": "+probe.CellLine(d), raw)
		})
	case probe.TypeOOM:
		var e *store.AgentEvent
		a.withJobOf(pid, func(js *jobState) {
			js.OOMs++
			data := map[string]any{"pid": pid, "source": m.Source}
			if m.AllocBytes != nil {
				data["alloc_bytes"] = *m.AllocBytes
			}
			if m.Device != nil {
				data["device"] = *m.Device
			}
			e = a.jobEvent(&js.Job, now, EventOOM, fmt.Sprintf("%s: CUDA out of memory in pid %d", js.Job.Name, pid), data)
		})
		if e != nil {
			a.emit(ctx, []*store.AgentEvent{e})
		}
	}
}

// maxPendingJobEvents bounds the events waiting for their job (jobEventSoon):
// past it, an event of a process no job holds yet is dropped.
const maxPendingJobEvents = 64

// jobEventSoon emits the event ev makes of pid's job: at once when a job
// holds pid, else once the machine view's next refreshes find it, for up
// to 10 s (a kernel's probe reports its first cell before a refresh has
// seen its new process). At most maxPendingJobEvents wait at once.
func (a *Agent) jobEventSoon(ctx context.Context, pid int, ev func(*jobState) *store.AgentEvent) {
	try := func() bool {
		found := false
		var e *store.AgentEvent
		a.withJobOf(pid, func(js *jobState) { found, e = true, ev(js) })
		if e != nil {
			a.emit(ctx, []*store.AgentEvent{e})
		}
		return found
	}
	if try() {
		return
	}
	if a.pendingJobEvents.Add(1) > maxPendingJobEvents {
		a.pendingJobEvents.Add(-1)
		return
	}
	go func() {
		defer a.pendingJobEvents.Add(-1)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			if try() {
				return
			}
		}
	}()
}

// withJobOf calls fn with the job holding pid, if there is one.
func (a *Agent) withJobOf(pid int, fn func(*jobState)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, js := range a.jobs {
		// A supervised run's job pid is its root even where the job's
		// processes are not listed (no GPU backend lists them).
		if js.Job.RootPID == pid && pid > 0 {
			fn(js)
			return
		}
		for _, p := range js.Job.Processes {
			if p.PID == pid {
				fn(js)
				return
			}
		}
	}
}
