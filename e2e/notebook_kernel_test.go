package e2e

// Notebook clients other than a Jupyter server start vramguard's kernel with
// connection files of their own naming: nbclient (papermill, nbconvert
// --execute), a bare jupyter_client.KernelManager, editors. These tests
// drive real ipykernel kernels through real nbclient and jupyter_client
// (Debian's python3-nbclient and python3-jupyter-client), with
// testdata/notebook/drive.py as the client.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// nbLab is one isolated Jupyter installation with vramguard's kernelspec
// installed, and its own vramguard state.
type nbLab struct {
	*env
	data, config, ipython string
}

const nbKernel = "vramguard"

// newNBLab installs the kernelspec with the run flags given (after the
// kernelspec's own --sample-interval).
func newNBLab(t *testing.T, installFlags ...string) *nbLab {
	t.Helper()
	d := t.TempDir()
	l := &nbLab{env: newEnv(t), data: filepath.Join(d, "data"), config: filepath.Join(d, "config"), ipython: filepath.Join(d, "ipython")}
	for _, p := range []string{l.data, l.config, l.ipython} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"jupyter", "install", "--user", "--python", python}, installFlags...)
	args = append(args, "--", "--sample-interval", "100ms")
	if r := l.vg(args...); r.Code != 0 {
		t.Fatalf("jupyter install: exit %d\n%s", r.Code, r.Stderr)
	}
	return l
}

func (l *nbLab) environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "JUPYTER_") || strings.HasPrefix(k, "VRAMGUARD_") || k == "IPYTHONDIR" || k == "XDG_DATA_HOME" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "JUPYTER_DATA_DIR="+l.data, "JUPYTER_RUNTIME_DIR="+filepath.Join(l.data, "runtime"),
		"JUPYTER_CONFIG_DIR="+l.config, "JUPYTER_PATH="+l.data, "IPYTHONDIR="+l.ipython,
		"VRAMGUARD_HOME="+l.home, "JUPYTER_PLATFORM_DIRS=0")
}

func (l *nbLab) vg(args ...string) testbin.Result {
	l.t.Helper()
	return testbin.Run(l.t, testbin.Command(l.t, l.environ(), bin, args...))
}

// drive runs drive.py (mode km or nb) with spec and decodes its report.
func (l *nbLab) drive(mode string, spec any, out any) {
	l.t.Helper()
	b, _ := json.Marshal(spec)
	r := testbin.Run(l.t, testbin.Command(l.t, l.environ(), python, filepath.Join("testdata", "notebook", "drive.py"), mode, nbKernel, string(b)))
	if r.Code != 0 {
		l.t.Fatalf("drive.py %s: exit %d\nstdout:\n%s\nstderr:\n%s", mode, r.Code, r.Stdout, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), out); err != nil {
		l.t.Fatalf("drive.py %s: %v\n%s\nstderr:\n%s", mode, err, r.Stdout, r.Stderr)
	}
}

func (l *nbLab) explain(ref string) map[string]any {
	l.t.Helper()
	var m map[string]any
	l.vg("explain", "--json", ref).JSON(l.t, &m)
	return m
}

// kmStep is one step of drive.py km's report.
type kmStep struct {
	Stdout, Stderr string
	Error          *string
	ExecutionCount *int `json:"execution_count"`
	Dead           bool
	Restarted      bool
}

type kmReport struct {
	ConnectionFile string `json:"connection_file"`
	Steps          []kmStep
}

// whoAmI is a cell that prints the kernel's pid and the run that
// supervises it.
const whoAmI = `import os, json; print(json.dumps({"pid": os.getpid(), "run": os.environ.get("VRAMGUARD_RUN_ID", "")}))`

type identity struct {
	PID int
	Run string
}

func parseWho(t *testing.T, stdout string) identity {
	t.Helper()
	var id identity
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &id); err != nil || id.PID == 0 {
		t.Fatalf("the cell did not print the kernel's identity: %q", stdout)
	}
	return id
}

// TestNotebookNbclient runs a notebook with nbclient on the vramguard
// kernel: nbclient names its own temporary connection file.
func TestNotebookNbclient(t *testing.T) {
	t.Parallel()
	l := newNBLab(t)
	var rep struct {
		Cells []struct {
			ExecutionCount int `json:"execution_count"`
			Stdout, Stderr string
		}
	}
	l.drive("nb", []string{whoAmI, "x = 6 * 7\nprint(x)"}, &rep)
	if len(rep.Cells) != 2 {
		t.Fatalf("cells: %+v", rep.Cells)
	}
	id := parseWho(t, rep.Cells[0].Stdout)
	if id.Run == "" {
		t.Fatalf("the kernel runs without vramguard's run id: %+v", id)
	}
	if got := strings.TrimSpace(rep.Cells[1].Stdout); got != "42" || rep.Cells[1].ExecutionCount != 2 {
		t.Errorf("second cell: In[%d] printed %q, want In[2] and 42", rep.Cells[1].ExecutionCount, got)
	}
	m := l.explain(id.Run)
	if m["reason"] != "success" {
		t.Errorf("run %s after nbclient shut its kernel down: reason %v, want success", id.Run, m["reason"])
	}
	// The kernel was supervised on nbclient's own file, not a server's.
	cmd := strings.Join(strs(m["command"]), " ")
	if !strings.Contains(cmd, "ipykernel_launcher -f ") || strings.Contains(cmd, "/kernel-") {
		t.Errorf("run command %q: want ipykernel_launcher on nbclient's temporary connection file", cmd)
	}
}

// TestNotebookKernelManagerRestart starts the kernel with a bare
// KernelManager (a temporary connection file, /tmp/tmpXXXX.json) and
// restarts it: the restarted kernel is the second attempt of the same run.
func TestNotebookKernelManagerRestart(t *testing.T) {
	t.Parallel()
	l := newNBLab(t)
	var rep kmReport
	l.drive("km", []map[string]any{{"run": whoAmI}, {"restart": true}, {"run": whoAmI}}, &rep)
	if base := filepath.Base(rep.ConnectionFile); strings.HasPrefix(base, "kernel-") || !strings.HasSuffix(base, ".json") {
		t.Fatalf("KernelManager's connection file %s: want a temporary name, not a server's kernel-ID.json", rep.ConnectionFile)
	}
	if len(rep.Steps) != 3 {
		t.Fatalf("steps: %+v", rep.Steps)
	}
	a, b := parseWho(t, rep.Steps[0].Stdout), parseWho(t, rep.Steps[2].Stdout)
	if a.Run == "" || a.Run != b.Run {
		t.Fatalf("run before the restart %q, after %q: want one run", a.Run, b.Run)
	}
	if a.PID == b.PID {
		t.Fatalf("the restarted kernel has the old pid %d", a.PID)
	}
	m := l.explain(a.Run)
	atts, _ := m["attempts_detail"].([]any)
	if len(atts) != 2 {
		t.Fatalf("run %s has %d attempts, want 2 (the restart continues the run): %v", a.Run, len(atts), m["attempts_detail"])
	}
	if first, _ := atts[0].(map[string]any); first["reason"] == "" || first["reason"] == nil {
		t.Errorf("first attempt has no reason: %v", first)
	}
}
