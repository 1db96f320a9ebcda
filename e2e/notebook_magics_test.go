package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestNotebookMagics drives %vramguard in a real ipykernel that
// jupyter_client's KernelManager starts under `vramguard run --kernel`, as a
// notebook client does (e2e/testdata/notebook/magics_kernel.py): a tensor
// shown as output then deleted is held by Out[n], one in the frame of a
// function that raised by the last exception; `free` returns both, and the
// kernel's VmRSS (read from /proc/PID/status by the driver) drops by their
// size while a named variable survives; an autosave made before the kernel
// is SIGKILLed restores the weights and optimizer state into the next kernel.
func TestNotebookMagics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	work := t.TempDir()
	jp := filepath.Join(work, "jupyter")
	spec := map[string]any{
		"argv": []string{bin, "--home", e.home, "run", "--kernel", "--name", "magics", "--",
			python, "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		"display_name": "vramguard magics", "language": "python", "interrupt_mode": "message",
	}
	b, _ := json.Marshal(spec)
	dir := filepath.Join(jp, "kernels", "vgmagics")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernel.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(work, "runtime")
	os.MkdirAll(runtime, 0o700)
	env := append(e.environ(), "JUPYTER_PATH="+jp, "JUPYTER_RUNTIME_DIR="+runtime, "JUPYTER_DATA_DIR="+filepath.Join(work, "data"),
		"JUPYTER_CONFIG_DIR="+filepath.Join(work, "config"), "IPYTHONDIR="+filepath.Join(work, "ipython"), "OMP_NUM_THREADS=1")
	script, _ := filepath.Abs(filepath.Join("testdata", "notebook", "magics_kernel.py"))
	r := testbin.Run(t, testbin.Command(t, env, python, script, "vgmagics", work))
	if r.Code != 0 {
		t.Fatalf("driver: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var f struct {
		PID, PID2   int
		Shown       struct{ Count int } `json:"shown"`
		Raised      struct{ Count int } `json:"raised"`
		Who         map[string]any      `json:"who"`
		WhoText     string              `json:"who_text"`
		Free        map[string]any      `json:"free"`
		FreeRSSDrop int64               `json:"free_rss_drop"`
		KeepSum     int64               `json:"keep_sum"`
		Files       []string            `json:"files"`
		Restore     struct{ Stdout, Stderr string }
		Status      struct{ Stdout, Stderr string }
		Autosave    struct{ Stdout, Stderr string }
		First       struct{ Stdout, Stderr string } `json:"first_after_restart"`
		Same        map[string]bool                 `json:"same"`
		Exception   string                          `json:"exception"`
		Cells       []struct {
			Src, Stdout, Stderr, Error string
			Result                     *string
		} `json:"cells"`
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range f.Cells {
				t.Logf("cell %q -> stdout %q stderr %q result %v error %q", c.Src, c.Stdout, c.Stderr, c.Result, c.Error)
			}
		}
	})
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &f); err != nil || f.Exception != "" {
		t.Fatalf("driver: %v %s\nstderr:\n%s", err, f.Exception, r.Stderr)
	}
	holders := map[string]float64{}
	groups, _ := f.Who["groups"].([]any)
	for _, g := range groups {
		for _, tn := range g.(map[string]any)["tensors"].([]any) {
			m := tn.(map[string]any)
			holders[m["path"].(string)] = m["bytes"].(float64)
		}
	}
	out := fmt.Sprintf("Out[%d]", f.Shown.Count)
	frame := fmt.Sprintf("sys.last_traceback: f() in In[%d], t", f.Raised.Count)
	for path, want := range map[string]float64{out: 48 << 20, frame: 40 << 20, "keep": 16 << 20} {
		if holders[path] != want {
			t.Errorf("who: %s holds %v bytes, want %v\n%s", path, holders[path], want, f.WhoText)
		}
	}
	const mib = 1 << 20
	if f.FreeRSSDrop < 85*mib || f.FreeRSSDrop > 91*mib {
		t.Errorf("the kernel's VmRSS dropped %d over free; Out[%d] and the frame's t are %d", f.FreeRSSDrop, f.Shown.Count, 88*mib)
	}
	if f.KeepSum != 16<<20 {
		t.Errorf("keep after free sums to %d", f.KeepSum)
	}
	if len(f.Files) != 1 || !strings.Contains(f.Autosave.Stdout, "autosave model opt every 10m00s") {
		t.Errorf("autosave: %v %q %q", f.Files, f.Autosave.Stdout, f.Autosave.Stderr)
	}
	if f.PID2 == 0 || f.PID2 == f.PID {
		t.Errorf("no new kernel after the SIGKILL: pids %d, %d", f.PID, f.PID2)
	}
	if !f.Same["model"] || !f.Same["opt"] || !strings.Contains(f.Restore.Stdout, "model: loaded into Linear") {
		t.Errorf("restore after SIGKILL: %v\n%s%s", f.Same, f.Restore.Stdout, f.Restore.Stderr)
	}
	if !strings.Contains(f.Status.Stdout, "probe: sending to ") || !strings.Contains(f.Status.Stdout, ", run ") {
		t.Errorf("status under run --kernel:\n%s", f.Status.Stdout)
	}
	t.Logf("status:\n%s", f.Status.Stdout)
	t.Logf("the next kernel's first cell wrote %q", f.First.Stderr)
}
