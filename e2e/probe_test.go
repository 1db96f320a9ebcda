package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestStallCollectsStacks: a probed Python job that hangs is killed as
// stalled, with its Python stacks in the evidence.
func TestStallCollectsStacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("run", "--stall-timeout", "2s", "--sample-interval", "200ms", "--", python, "-c",
		"import time\ndef wait_for_rank_3():\n    time.sleep(600)\nprint('training', flush=True)\nwait_for_rank_3()\n")
	pm := e.explain("last")
	if pm["reason"] != "stalled" || r.code != 137 {
		t.Fatalf("reason %v exit %d\n%s", pm["reason"], r.code, r.stderr)
	}
	ev := strings.Join(strs(pm["evidence"]), "\n")
	if !strings.Contains(ev, "Python stacks") || !strings.Contains(ev, "wait_for_rank_3") {
		t.Errorf("no Python stack naming the hung function in the evidence:\n%s", ev)
	}
}

// TestUnsavedWarning: a job that trains (optimizer steps) without saving
// gets one warning line and an unsaved_work event.
func TestUnsavedWarning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("run", "--unsaved-warning", "1s", "--sample-interval", "200ms", "--probe-hz", "5", "--", python, "-c", `
import time, torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
end = time.time() + 4
while time.time() < end:
    m(torch.randn(2, 4)).sum().backward(); opt.step(); time.sleep(0.01)
`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "(--unsaved-warning 1s): a crash now loses it all"); n != 1 {
		t.Errorf("%d unsaved-work warnings, want 1:\n%s", n, r.stderr)
	}
	pm := e.explain("last")
	if eventKinds(pm)["unsaved_work"] == 0 {
		t.Error("no unsaved_work event")
	}
	probe, ok := pm["probe"].(map[string]any)
	if !ok || probe["optimizer_steps"].(float64) < 10 {
		t.Errorf("probe summary: %v", pm["probe"])
	}
}

// TestProbedTrainingExplain: a real training loop with checkpoints and a
// forked DataLoader, probed end to end through `vramguard run`.
func TestProbedTrainingExplain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	r := e.run("run", "--", python, "-c", fmt.Sprintf(`
import torch
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
m = torch.nn.Linear(8, 1)
opt = torch.optim.Adam(m.parameters())
for epoch in range(2):
    for x, y in DataLoader(ds, batch_size=32, num_workers=2):
        opt.zero_grad(); torch.nn.functional.mse_loss(m(x), y).backward(); opt.step()
    torch.save({"epoch": epoch, "model": m.state_dict(), "opt": opt.state_dict()}, "%s/ck-%%d.pt" %% epoch)
print("cuda initialised:", torch.cuda.is_initialized())
`, dir))
	if r.code != 0 || !strings.Contains(r.stdout, "cuda initialised: False") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	probe := e.explain("last")["probe"].(map[string]any)
	if probe["optimizer_steps"] != float64(16) {
		t.Errorf("optimizer_steps = %v, want 16", probe["optimizer_steps"])
	}
	cks := probe["checkpoints"].([]any)
	if len(cks) != 2 || cks[1].(map[string]any)["path"] != dir+"/ck-1.pt" || cks[0].(map[string]any)["bytes"].(float64) <= 0 {
		t.Errorf("checkpoints = %v", cks)
	}
	if probe["peak_allocated_bytes"] != nil || probe["peak_reserved_bytes"] != nil {
		t.Errorf("CPU job: peaks should be null, got %v %v", probe["peak_allocated_bytes"], probe["peak_reserved_bytes"])
	}
	if probe["samples"].(float64) < 1 {
		t.Errorf("samples = %v", probe["samples"])
	}
}
