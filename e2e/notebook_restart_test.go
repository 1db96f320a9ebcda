package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestKernelRestartsInARow restarts a vramguard kernel 50 times in a row
// through a real jupyter_client.KernelManager, alternately alive (killed at
// once, as a client's restart with now=True does) and dead (its process
// ended by a cell, or every tenth time killed by its --memory-limit), each
// time on the same connection file and ports. Every
// restarted kernel must answer its first cell, as the same run, with a new
// process: a restart that hangs is what a user sees when the new kernel
// cannot bind the ports the old one, or its supervisor, still holds.
func TestKernelRestartsInARow(t *testing.T) {
	t.Parallel()
	const restarts = 50
	l := newNBLab(t, "--memory-limit", "300m")
	const grow = `import time
chunks = []
while True:
    chunks.append(b"x" * (16 << 20))
    time.sleep(0.02)`
	steps := []map[string]any{{"run": whoAmI}}
	for i := range restarts {
		switch {
		case i%10 == 9:
			steps = append(steps, map[string]any{"until_dead": grow})
		case i%2 == 1:
			steps = append(steps, map[string]any{"until_dead": "import os; os._exit(3)"})
		}
		steps = append(steps, map[string]any{"restart": true, "ready_timeout": 60}, map[string]any{"run": whoAmI, "timeout": 60})
	}
	var rep kmReport
	// 50 kernel starts: about a minute on a quiet machine, several under
	// the suite's load
	l.driveFor(15*time.Minute, "km", steps, &rep)
	first := parseWho(t, rep.Steps[0].Stdout)
	pids := map[int]bool{first.PID: true}
	n := 0
	for i, st := range rep.Steps[1:] {
		if !st.Restarted {
			continue
		}
		n++
		who := rep.Steps[i+2]
		id := parseWho(t, who.Stdout)
		if id.Run != first.Run {
			t.Errorf("restart %d: the kernel runs as %s, want the run %s", n, id.Run, first.Run)
		}
		if pids[id.PID] {
			t.Errorf("restart %d: pid %d answered before: not a new kernel", n, id.PID)
		}
		pids[id.PID] = true
	}
	if n != restarts {
		t.Fatalf("%d restarts done, want %d", n, restarts)
	}
	m := l.explain(first.Run)
	if atts, _ := m["attempts_detail"].([]any); len(atts) != restarts+1 {
		t.Errorf("run %s has %d attempts, want %d: %v", first.Run, len(atts), restarts+1, fmt.Sprint(m["attempts_detail"]))
	}
}
