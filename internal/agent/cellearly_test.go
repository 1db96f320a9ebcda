package agent

import (
	"context"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestCellBeforeItsJobIsSeen: a kernel's probe reports its first cell
// before the machine view's refresh has seen the kernel's new process (the
// cell ran at once after start-up). The event waits for the job rather
// than being dropped, and is recorded once a refresh finds the process.
func TestCellBeforeItsJobIsSeen(t *testing.T) {
	r := newRig(t, twoJobs, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const pid = 960001
	r.ag.probeMessage(ctx, probe.Message{V: 1, Type: probe.TypeCell, PID: pid, PeerPID: pid, ExecutionCount: 1, FirstLine: "import torch", Seconds: 0.5})
	if n := cells(t, r.st); n != 0 {
		t.Fatalf("%d cell events before any refresh saw the process", n)
	}
	r.step(1)
	testbin.WaitFor(t, 10*time.Second, "the early cell's event", func() bool { return cells(t, r.st) == 1 })
	// an event of a process no job will ever hold is dropped in the end,
	// and no more than the bound wait at once
	for range maxPendingJobEvents + 10 {
		r.ag.probeMessage(ctx, probe.Message{V: 1, Type: probe.TypeCell, PID: 4242, PeerPID: 4242, ExecutionCount: 1})
	}
	if n := r.ag.pendingJobEvents.Load(); n > maxPendingJobEvents {
		t.Errorf("%d events wait for their job, bound %d", n, maxPendingJobEvents)
	}
}

func cells(t *testing.T, st *store.Store) int {
	t.Helper()
	evs, err := st.AgentEvents(context.Background(), store.AgentEventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Kind == EventCell {
			n++
		}
	}
	return n
}
