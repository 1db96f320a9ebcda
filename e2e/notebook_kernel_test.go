package e2e

// Notebook clients other than a Jupyter server start vramguard's kernel with
// connection files of their own naming: nbclient (papermill, nbconvert
// --execute), a bare jupyter_client.KernelManager, editors. These tests
// drive real ipykernel kernels through real nbclient and jupyter_client
// (Debian's python3-nbclient and python3-jupyter-client), with
// testdata/notebook/drive.py as the client.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/units"
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
	return testbin.JupyterLab{Data: l.data, Config: l.config, IPython: l.ipython, Home: l.home}.Environ()
}

func (l *nbLab) vg(args ...string) testbin.Result {
	l.t.Helper()
	return testbin.Run(l.t, testbin.Command(l.t, l.environ(), bin, args...))
}

// drive runs drive.py (mode km or nb) with spec and decodes its report.
func (l *nbLab) drive(mode string, spec any, out any) {
	l.t.Helper()
	l.driveFor(testbin.Timeout, mode, spec, out)
}

// driveFor is drive with a limit of its own on drive.py.
func (l *nbLab) driveFor(limit time.Duration, mode string, spec any, out any) {
	l.t.Helper()
	b, _ := json.Marshal(spec)
	r := testbin.Run(l.t, testbin.CommandFor(l.t, limit, l.environ(), python, filepath.Join("testdata", "notebook", "drive.py"), mode, nbKernel, string(b)))
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

// Stderr is step i's stderr and error, for messages.
func (r kmReport) Stderr(i int) string {
	s := r.Steps[i].Stderr
	if e := r.Steps[i].Error; e != nil {
		s += " (raised " + *e + ")"
	}
	return s
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
// restarts it as Jupyter does (a shutdown_request; SIGTERM when the kernel
// has not ended after half of shutdown_wait_time): the restarted kernel is
// the second attempt of the same run, the first ended "restarted", and the
// second, shut down, "success".
func TestNotebookKernelManagerRestart(t *testing.T) {
	t.Parallel()
	l := newNBLab(t)
	var rep kmReport
	l.drive("km", []map[string]any{{"run": whoAmI}, {"restart": true, "wait": 3}, {"run": whoAmI}}, &rep)
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
	for i, want := range []string{"restarted", "success"} {
		if a, _ := atts[i].(map[string]any); a["reason"] != want {
			t.Errorf("attempt %d ended %v, want %s: %v", i+1, a["reason"], want, a)
		}
	}
}

// startEnv is cell code that prints a variable of the kernel's environment
// as the kernel was started (/proc/self/environ keeps it when the kernel
// takes it out of os.environ).
func startEnv(name string) string {
	return fmt.Sprintf(`env = dict(kv.split("=", 1) for kv in open("/proc/self/environ").read().split("\0") if "=" in kv)
print(env.get(%q, ""))`, name)
}

// TestNotebookDeathNamesCell kills a kernel (SIGKILL) in a cell that grew
// its memory by 200 MiB, after an autosave: the restarted kernel's first
// cell names the cell and its growth (from the supervisor's samples of the
// kernel, checked against the size of the data), the newest autosave, and
// the kernel is given that file; explain lists the cells. The probe reports
// the cells; the autosave is reported by the cell itself, through the
// probe's socket as %vramguard autosave does, so the file is the test's.
func TestNotebookDeathNamesCell(t *testing.T) {
	t.Parallel()
	l := newNBLab(t)
	dir := t.TempDir()
	save := filepath.Join(dir, "autosave-20260101-000000-1.pt")
	autosave := fmt.Sprintf(`open(%q, "wb").write(b"saved")
from vramguard import _probe as _vp
_vp._p.send({"type": "ckpt", "path": %q, "bytes": 5, "ok": True, "autosave": True, "objects": ["model", "opt"]})
print("saved")`, save, save)
	die := `import os, time
data = b"x" * (200 << 20)
time.sleep(0.6)
os.kill(os.getpid(), 9)`
	var rep kmReport
	l.drive("km", []map[string]any{{"run": autosave}, {"run": whoAmI}, {"until_dead": die}, {"restart": true}, {"run": whoAmI}, {"run": startEnv("VRAMGUARD_LAST_AUTOSAVE")}}, &rep)
	if len(rep.Steps) != 6 || !rep.Steps[2].Dead {
		t.Fatalf("steps %+v: want the kernel dead after the third", rep.Steps)
	}
	before, after := parseWho(t, rep.Steps[1].Stdout), parseWho(t, rep.Steps[4].Stdout)
	if before.Run != after.Run {
		t.Errorf("the restarted kernel runs as %s, want %s", after.Run, before.Run)
	}
	notice := rep.Steps[4].Stderr
	m := reNotice.FindStringSubmatch(notice)
	if m == nil {
		t.Fatalf("the restarted kernel's first cell printed %q; want the notice naming In[3]", notice)
	}
	growth, err := units.ParseBytes(m[1])
	if err != nil {
		t.Fatalf("growth %q: %v", m[1], err)
	}
	// 200 MiB of data were written; the tree's RSS may hold a little more.
	if growth < 190<<20 || growth > 260<<20 {
		t.Errorf("the notice says the cell added %s; it wrote 200 MiB", m[1])
	}
	if !strings.Contains(notice, "died: killed") || !strings.Contains(notice, "Newest autosave: "+save+", ") || !strings.Contains(notice, "(model, opt)") ||
		!strings.Contains(notice, " explain "+before.Run) {
		t.Errorf("notice %q: want the reason, the autosave and explain of run %s", notice, before.Run)
	}
	if got := strings.TrimSpace(rep.Steps[5].Stdout); got != save {
		t.Errorf("the restarted kernel was given VRAMGUARD_LAST_AUTOSAVE=%q, want %q", got, save)
	}
	doc := l.explain(before.Run)
	atts, _ := doc["attempts_detail"].([]any)
	if len(atts) != 2 {
		t.Fatalf("attempts %v, want 2", doc["attempts_detail"])
	}
	// The first attempt is the kernel that was killed.
	first, _ := atts[0].(map[string]any)
	k, _ := first["kernel"].(map[string]any)
	running, _ := k["running"].(map[string]any)
	as, _ := k["autosave"].(map[string]any)
	if running["execution_count"] != 3.0 || running["first_line"] != "import os, time" || as["path"] != save {
		t.Errorf("explain's kernel section %v: want In[3] running and the autosave", k)
	}
	if age, _ := as["age_s"].(float64); age <= 0 || age > 60 {
		t.Errorf("autosave age at the death %v s", as["age_s"])
	}
	text := l.vg("explain", before.Run).Stdout
	if !strings.Contains(text, "cells (attempt 1, ") || !strings.Contains(text, "In[3]  running") {
		t.Errorf("explain does not list the cells:\n%s", text)
	}
}

// reNotice finds the running cell and its growth in a death notice.
var reNotice = regexp.MustCompile(`while In\[3\] was running \(\+([0-9.]+ [KMG]iB) since it started\)`)

// TestNotebookMemoryLimitNamesCell is the acceptance test of a kernel
// killed by --memory-limit (a real cgroup) while a cell grows its host
// memory: the next kernel's first output names that cell. Nothing in the
// cells reports them: the probe does, at IPython's pre_run_cell.
func TestNotebookMemoryLimitNamesCell(t *testing.T) {
	t.Parallel()
	l := newNBLab(t, "--memory-limit", "300m")
	grow := `import time
chunks = []
while True:
    chunks.append(b"x" * (16 << 20))
    time.sleep(0.02)`
	var rep kmReport
	l.drive("km", []map[string]any{{"run": whoAmI}, {"until_dead": grow}, {"restart": true}, {"run": "1 + 1"}}, &rep)
	if len(rep.Steps) != 4 || !rep.Steps[1].Dead {
		t.Fatalf("steps %+v: want the kernel dead after the second", rep.Steps)
	}
	run := parseWho(t, rep.Steps[0].Stdout).Run
	notice := rep.Steps[3].Stderr
	if !strings.Contains(notice, "died: host_oom_killed") || !strings.Contains(notice, "while In[2] was running (+") {
		t.Fatalf("the next kernel's first output %q: want host_oom_killed while In[2] was running", notice)
	}
	doc := l.explain(run)
	atts, _ := doc["attempts_detail"].([]any)
	first, _ := atts[0].(map[string]any)
	k, _ := first["kernel"].(map[string]any)
	running, _ := k["running"].(map[string]any)
	if first["reason"] != "host_oom_killed" || running["execution_count"] != 2.0 || running["first_line"] != "import time" {
		t.Errorf("first attempt %v: want host_oom_killed with In[2] (import time) running", first)
	}
	// The growth the notice gives is the sampled one; the cell was killed
	// near the 300 MiB limit, having started at the kernel's start-up size.
	if g, _ := running["host_growth_bytes"].(float64); g < 100<<20 || g > 300<<20 {
		t.Errorf("the running cell grew %v bytes by the samples; the limit is 300 MiB", running["host_growth_bytes"])
	}
}

// TestNotebookAutosaveRestoreAfterKill autosaves a model and its optimizer
// with real torch, SIGKILLs the kernel, and restores them into the next
// kernel's fresh objects with %vramguard restore and no argument: the file
// is the one run --kernel gave the next kernel. Weights and optimizer state
// are equal to those before the kill.
func TestNotebookAutosaveRestoreAfterKill(t *testing.T) {
	t.Parallel()
	l := newNBLab(t)
	dir := t.TempDir()
	build := func(seed int) string {
		return fmt.Sprintf(`import torch, json
torch.manual_seed(%d)
model = torch.nn.Linear(8, 4)
opt = torch.optim.Adam(model.parameters(), lr=0.1)
model(torch.randn(16, 8)).sum().backward()
opt.step()`, seed)
	}
	state := `print(json.dumps({"weight": model.weight.flatten().tolist(), "bias": model.bias.tolist(),
    "exp_avg": opt.state_dict()["state"][0]["exp_avg"].flatten().tolist(), "step": float(opt.state_dict()["state"][0]["step"])}))`
	var rep kmReport
	l.drive("km", []map[string]any{
		{"run": build(0)}, {"run": "%vramguard autosave model opt --every 10m --dir " + dir}, {"run": state},
		{"until_dead": "import os; os.kill(os.getpid(), 9)"}, {"restart": true},
		{"run": build(1)}, {"run": state}, {"run": "%vramguard restore"}, {"run": state},
	}, &rep)
	if len(rep.Steps) != 9 || !rep.Steps[3].Dead {
		t.Fatalf("steps %+v", rep.Steps)
	}
	saved, fresh, restored := rep.Steps[2].Stdout, rep.Steps[6].Stdout, rep.Steps[8].Stdout
	if saved == "" || saved == fresh {
		t.Fatalf("the state before the kill %q is not told apart from a fresh model's %q", saved, fresh)
	}
	if restored != saved {
		t.Errorf("restored state\n%s\nwant the state before the kill\n%s\nrestore said: %s %s", restored, saved, rep.Steps[7].Stdout, rep.Stderr(7))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "autosave-*.pt"))
	if len(files) != 1 {
		t.Fatalf("autosave files %v, want one", files)
	}
	if notice := rep.Steps[5].Stderr; !strings.Contains(notice, "died: killed") || !strings.Contains(notice, "Newest autosave: "+files[0]+", ") {
		t.Errorf("the next kernel's first output %q: want the death and the autosave %s", notice, files[0])
	}
}

// TestNotebookCellsOnDashboard runs cells in a supervised kernel while
// `serve` runs on the same state directory: the kernel's probe reports the
// cells to the agent too, and the dashboard in Chromium marks each cell's
// span (its start to its end) on the kernel's plot, labelled In[N].
func TestNotebookCellsOnDashboard(t *testing.T) {
	t.Parallel()
	l := newNBLab(t)
	s := startServe(t, l.home, "--gpu-backend", "none")
	var rep kmReport
	l.drive("km", []map[string]any{{"run": whoAmI}, {"run": "import time; time.sleep(1.5)"}}, &rep)
	if len(rep.Steps) != 2 {
		t.Fatalf("steps %+v", rep.Steps)
	}
	var evs struct {
		Events []struct {
			JobKey string `json:"job_key"`
			Kind   string
			Data   struct {
				ExecutionCount int       `json:"execution_count"`
				Start          time.Time `json:"start"`
				End            time.Time `json:"end"`
			}
		}
	}
	key := ""
	var cells []int
	testbin.WaitFor(t, 20*time.Second, "the agent's cell events", func() bool {
		getJSON(t, s.URL+"/api/v1/events?range=15m", &evs)
		key, cells = "", nil
		for _, e := range evs.Events {
			if e.Kind == "cell" {
				key = e.JobKey
				cells = append(cells, e.Data.ExecutionCount)
			}
		}
		return len(cells) == 2
	}, func() {
		var jobs any
		getJSON(t, s.URL+"/api/v1/jobs", &jobs)
		t.Logf("jobs: %v\nevents: %+v\nserve: %s", jobs, evs.Events, s.errb.String())
	})
	b := startBrowser(t)
	b.open(s.URL + "/#range=15m")
	b.waitTrue(30*time.Second, "the dashboard to load", `return document.body.dataset.ready === "15m"`)
	var marks []struct {
		Label  string
		X0, X1 float64
		T0, T1 float64
	}
	testbin.WaitFor(t, 30*time.Second, "the cells marked on the kernel's plot", func() bool {
		var ok bool
		b.eval(fmt.Sprintf(`const p = vg.plots[%q]; return !!p && (p.cellMarks || []).length === 2`, key), &ok)
		return ok
	}, func() {
		var page any
		b.eval(fmt.Sprintf(`const p = vg.plots[%q], tl = vg.timelines[%q];
		  return {plots: Object.keys(vg.plots), x: p ? [p.scales.x.min, p.scales.x.max] : null, marks: p ? p.cellMarks : null,
		    samples: tl ? [tl.t.length, tl.t[0], tl.t[tl.t.length - 1]] : null,
		    cells: vg.events.filter(e => e.kind === "cell").map(e => [e.job_key, e.data])}`, key, key), &page)
		t.Logf("the page: %v", page)
	})
	b.eval(fmt.Sprintf(`return vg.plots[%q].cellMarks`, key), &marks)
	for i, want := range []string{"In[1]", "In[2]"} {
		if marks[i].Label != want {
			t.Errorf("mark %d: %q, want %q", i, marks[i].Label, want)
		}
	}
	// In[2] slept 1.5 s: its span on the plot is that long, and wider than
	// the instant In[1].
	if span := marks[1].T1 - marks[1].T0; span < 1.5 || span > 3 {
		t.Errorf("In[2] is marked from %.3f to %.3f (%.2f s); it slept 1.5 s", marks[1].T0, marks[1].T1, span)
	}
	if marks[1].X1-marks[1].X0 <= marks[0].X1-marks[0].X0 {
		t.Errorf("In[2]'s band (%.0f px) is no wider than In[1]'s (%.0f px)", marks[1].X1-marks[1].X0, marks[0].X1-marks[0].X0)
	}
}
