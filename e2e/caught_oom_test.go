package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestCaughtOOMIsNoCleanSuccess: a training loop catches a CUDA OOM, prints
// that training completed and exits 0. The OOM is raised by the probe's fake
// torch.cuda (internal/probe/testdata/fakecuda: the allocator's OOM observer
// is called and torch.cuda.OutOfMemoryError raised, as on a GPU), so the real
// probe inside the job reports it through its socket to `vramguard run`. The
// run keeps exit status 0 and the reason success, but its post-mortem and
// `explain` say an OOM was caught, with the probe's figures.
func TestCaughtOOMIsNoCleanSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	script, err := filepath.Abs(filepath.Join("..", "internal", "probe", "testdata", "scripts", "cuda_fake.py"))
	if err != nil {
		t.Fatal(err)
	}
	r := testbin.Run(t, testbin.Vramguard(t, append(e.environ(), "MODE=observer"),
		"run", "--probe-hz", "20", "--sample-interval", "200ms", "--", python, script))
	if r.Code != 0 || !strings.Contains(r.Stdout, "caught OOM") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if strings.Contains(r.Stderr, "finished successfully") || !strings.Contains(r.Stderr, "warning: a CUDA out-of-memory error caught by the job") {
		t.Errorf("the run's post-mortem reads as a clean success:\n%s", r.Stderr)
	}
	pm := e.explain("last")
	if pm["reason"] != "success" || pm["exit_code"].(float64) != 0 {
		t.Errorf("reason %v exit %v, want success 0", pm["reason"], pm["exit_code"])
	}
	if w := strs(pm["warnings"]); len(w) != 1 || !strings.Contains(w[0], "out-of-memory") {
		t.Errorf("warnings %q", w)
	}
	if !strings.Contains(pm["summary"].(string), "out-of-memory error was raised in it and caught") {
		t.Errorf("summary %q", pm["summary"])
	}
	// the probe's own figures of the OOM: the fake allocator failed to
	// allocate 2 GiB on GPU 0 (fakecuda.oom's default)
	ev := strings.Join(strs(pm["evidence"]), "\n")
	if !strings.Contains(ev, "2 GiB could not be allocated on GPU 0") || !strings.Contains(ev, "3 optimizer steps") {
		t.Errorf("evidence:\n%s", ev)
	}
	probe, _ := pm["probe"].(map[string]any)
	if probe == nil || probe["num_ooms"] == nil {
		t.Fatalf("probe summary %v", pm["probe"])
	}
	if oom, _ := probe["oom"].(map[string]any); oom == nil || oom["source"] != "observer" || oom["alloc_bytes"].(float64) != 2<<30 {
		t.Errorf("probe's OOM %v", probe["oom"])
	}
}
