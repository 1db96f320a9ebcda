package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSchedulerTimeLimit: `vramguard run -- srun …` at the job's time limit,
// re-enacted with a real probed training job: it trains 60 optimizer steps,
// saves a checkpoint at step 40, then its output carries slurmstepd's line
// (as srun relays it) and the supervisor is sent SIGTERM, as Slurm sends it.
// The end is time_limit, not the user's interrupt; what was lost comes from
// the run's own numbers, checked against the job's: the checkpoint it wrote
// and the 20 steps it made after it.
func TestSchedulerTimeLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck-40.pt")
	cmd, so, se := e.start("run", "--probe-hz", "10", "--", python, "-c", fmt.Sprintf(`
import sys, time, torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(1, 61):
    m(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
    if step == 40:
        torch.save({"model": m.state_dict(), "step": step}, %q)
print("made 60 steps, saved at 40", flush=True)
time.sleep(1.5)
print("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", file=sys.stderr, flush=True)
print("slurmstepd: error: *** STEP 4242.0 ON n1 CANCELLED AT 2026-12-03T10:11:12 DUE TO TIME LIMIT ***", file=sys.stderr, flush=True)
time.sleep(600)
`, ck))
	waitFor(t, 60*time.Second, "the job's Slurm line", func() bool { return strings.Contains(se.String(), "DUE TO TIME LIMIT") })
	if !strings.Contains(so.String(), "made 60 steps") {
		t.Fatalf("stdout %q", so.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	pm := e.explain("last")
	if pm["reason"] != "time_limit" {
		t.Fatalf("reason %v (%v), want time_limit\n%s", pm["reason"], pm["summary"], se.String())
	}
	ev := strings.Join(strs(pm["evidence"]), "\n")
	if !strings.Contains(ev, "*** STEP 4242.0 ON n1 CANCELLED AT 2026-12-03T10:11:12 DUE TO TIME LIMIT ***") {
		t.Errorf("evidence lacks Slurm's line:\n%s", ev)
	}
	lost, _ := pm["lost"].(map[string]any)
	if lost == nil {
		t.Fatalf("no lost object: %v", pm)
	}
	if lost["checkpoint"] != ck || lost["optimizer_steps"] != float64(20) {
		t.Errorf("lost %v, want the checkpoint %s and the 20 steps made after it", lost, ck)
	}
	if s, _ := lost["save_s"].(float64); s <= 0 || s > 30 {
		t.Errorf("save_s %v", lost["save_s"])
	}
	if age, _ := lost["age_s"].(float64); age < 1.5 || age > 60 {
		t.Errorf("age_s %v: the checkpoint was written at least 1.5 s before the end", lost["age_s"])
	}
	adv := strings.Join(strs(pm["advice"]), "\n")
	if n, _ := lost["signal_lead_s"].(float64); n < 60 || !strings.Contains(adv, fmt.Sprintf("--signal=B:USR1@%d", int(n))) || !strings.Contains(adv, "--requeue") {
		t.Errorf("lead %v, advice:\n%s", lost["signal_lead_s"], adv)
	}
	if strings.Contains(se.String(), "stopped by the user") {
		t.Errorf("the run's post-mortem calls it the user's stop:\n%s", se.String())
	}
}
