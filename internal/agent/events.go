// The events the agent raises: their kinds, recording one and dispatching it to the
// alerts and to those who wait for it.

package agent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Event kinds the agent raises: timeline's, under the names the agent's
// code and tests use. timeline.Alert says which are alerts.
const (
	EventStart       = timeline.KindStart
	EventExit        = timeline.KindExit
	EventDied        = timeline.KindDied
	EventRestart     = timeline.KindRestart
	EventOOM         = timeline.KindOOM
	EventCheckpoint  = timeline.KindCheckpoint
	EventLeak        = timeline.KindLeak
	EventOOMForecast = timeline.KindOOMForecast
	EventUnsaved     = timeline.KindUnsaved
	EventNote        = timeline.KindNote
	EventCell        = timeline.KindCell
)

func (a *Agent) jobEvent(j *attrib.Job, t time.Time, kind, msg string, data map[string]any) *store.AgentEvent {
	var raw json.RawMessage
	if data != nil {
		raw, _ = json.Marshal(data)
	}
	return a.jobEventRaw(j, t, kind, msg, raw)
}

func (a *Agent) jobEventRaw(j *attrib.Job, t time.Time, kind, msg string, data json.RawMessage) *store.AgentEvent {
	return &store.AgentEvent{JobKey: j.Key, JobName: j.Name, T: t, Kind: kind, Message: msg, Data: data}
}

// AddEvent records an event (from the API or a test) and dispatches it.
func (a *Agent) AddEvent(ctx context.Context, e *store.AgentEvent) error {
	if e.T.IsZero() {
		e.T = a.cfg.Now()
	}
	if err := a.cfg.Store.AddAgentEvent(ctx, e); err != nil {
		return err
	}
	a.notify(e)
	return nil
}

func (a *Agent) emit(ctx context.Context, evs []*store.AgentEvent) {
	for _, e := range evs {
		if err := a.cfg.Store.AddAgentEvent(ctx, e); err != nil {
			a.log.Warn("record event", "kind", e.Kind, "err", err)
			continue
		}
		a.notify(e)
	}
}

func (a *Agent) notify(e *store.AgentEvent) {
	if timeline.Alert(e.Kind) {
		a.alerts.Raise(e)
	}
	a.mu.Lock()
	a.evSeq = max(a.evSeq, e.ID)
	close(a.evCh)
	a.evCh = make(chan struct{})
	a.mu.Unlock()
}

// WaitEvent returns when an event newer than id exists or ctx ends.
func (a *Agent) WaitEvent(ctx context.Context, id int64) {
	a.mu.RLock()
	if a.evSeq > id {
		a.mu.RUnlock()
		return
	}
	ch := a.evCh
	a.mu.RUnlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
