package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/jupyter"
)

// TestKernelsTable: the kernels table's FLAGS marks the idle holders (as
// jupyter.Collector sets Idle) and nothing else; golden.
func TestKernelsTable(t *testing.T) {
	u64 := func(v uint64) *uint64 { return &v }
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	es := []jupyter.Entry{
		{Notebook: "/nb/train.ipynb", KernelID: "3f2a9c1e-aaaa", PID: 22, User: "alice", GPUBytes: 20 << 30, AllocatedBytes: u64(18 << 30), ReservedBytes: u64(19 << 30),
			RSSBytes: 3 << 30, ExecutionState: "idle", LastActivity: now.Add(-2 * time.Hour), IdleS: 7200},
		{Notebook: "/nb/eval.ipynb", KernelID: "77b1d0c2-bbbb", PID: 30, User: "bob", GPUBytes: 6 << 30, RSSBytes: 1 << 30,
			ExecutionState: "idle", LastActivity: now.Add(-10 * time.Minute), IdleS: 600},
		{Notebook: "/nb/plot.ipynb", KernelID: "0c9e4411-cccc", PID: 40, User: "bob", RSSBytes: 200 << 20,
			ExecutionState: "idle", LastActivity: now.Add(-3 * time.Hour), IdleS: 10800},
		{KernelID: "9a8b7c6d-dddd", PID: 50, User: "carol", GPUBytes: 2 << 30, RSSBytes: 500 << 20, ExecutionState: "busy", IdleS: 4, RunID: "r-abc"},
	}
	for i := range es {
		es[i].Idle = es[i].IdleHolder(jupyter.DefaultIdleWindow)
	}
	var out bytes.Buffer
	printKernels(&out, es)
	golden(t, "kernels.golden", out.String())
}
