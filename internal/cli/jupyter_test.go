package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/timeline"
)

func runJupyterCLI(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb},
		Now: time.Now, Getenv: func(k string) string { return env[k] }}
	root := NewCmdRoot(f)
	root.SetArgs(args)
	code := exitCode(f, root.Execute())
	return out.String(), errb.String(), code
}

func TestJupyterInstallUsage(t *testing.T) {
	data := t.TempDir()
	env := map[string]string{"JUPYTER_DATA_DIR": data}
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"two places", []string{"--user", "--sys-prefix"}, 2, "at most one"},
		{"bad name", []string{"--user", "--name", "a/b"}, 2, "invalid --name"},
		{"empty display name", []string{"--user", "--display-name", " "}, 2, "--display-name"},
		{"no such python", []string{"--user", "--python", "/nonexistent/python"}, 2, "--python"},
		{"bad limit", []string{"--user", "--memory-limit", "lots"}, 2, "--memory-limit"},
		{"tiny limit", []string{"--user", "--memory-limit", "1k"}, 2, "too small"},
		{"detach", []string{"--user", "--", "--detach"}, 2, "--detach cannot be used"},
		{"restart", []string{"--user", "--", "--restart=always"}, 2, "--restart cannot be used"},
		{"unknown run flag", []string{"--user", "--", "--frobnicate"}, 2, "run flags"},
		{"a command", []string{"--user", "--", "python"}, 2, "unexpected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := runJupyterCLI(t, env, append([]string{"jupyter", "install"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.msg) || strings.Count(strings.TrimSpace(errs), "\n") > 1 {
				t.Errorf("exit %d, stderr %q; want %d with %q", code, errs, tt.code, tt.msg)
			}
		})
	}
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Errorf("a failed install wrote %v", ents)
	}
}

func TestJupyterInstallUninstall(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatal("needs /usr/bin/python3 with ipykernel (Debian: python3-ipykernel)")
	}
	data, home := t.TempDir(), t.TempDir()
	env := map[string]string{"JUPYTER_DATA_DIR": data, "VRAMGUARD_HOME": home}
	out, errs, code := runJupyterCLI(t, env, "jupyter", "install", "--user", "--python", "/usr/bin/python3", "--memory-limit", "8g", "--json", "--", "--stall-timeout", "1h")
	if code != 0 {
		t.Fatalf("install: exit %d: %s", code, errs)
	}
	var doc struct {
		Dir  string   `json:"dir"`
		Argv []string `json:"argv"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("install --json: %v\n%s", err, out)
	}
	if doc.Dir != filepath.Join(data, "kernels", "vramguard") {
		t.Errorf("installed in %s", doc.Dir)
	}
	joined := strings.Join(doc.Argv, " ")
	for _, want := range []string{"--home " + home + " run --kernel", "--memory-limit 8g --stall-timeout 1h -- /usr/bin/python3 -m ipykernel_launcher -f {connection_file}"} {
		if !strings.Contains(joined, want) {
			t.Errorf("argv %q lacks %q", joined, want)
		}
	}
	out, _, code = runJupyterCLI(t, env, "jupyter", "list", "--json")
	if code != 0 || !strings.Contains(out, doc.Dir) {
		t.Errorf("list: exit %d %s", code, out)
	}
	if out, errs, code := runJupyterCLI(t, env, "jupyter", "uninstall", "--user"); code != 0 || !strings.Contains(out, doc.Dir) {
		t.Fatalf("uninstall: exit %d: %s%s", code, out, errs)
	}
	if _, err := os.Stat(doc.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still there", doc.Dir)
	}
	if _, errs, code := runJupyterCLI(t, env, "jupyter", "uninstall", "--user"); code != 1 || !strings.Contains(errs, "no vramguard kernelspec") {
		t.Errorf("second uninstall: exit %d: %s", code, errs)
	}
}

func TestMatchKernel(t *testing.T) {
	es := []jupyter.Entry{
		{KernelID: "3f2a9c1e-0000", Notebook: "/nb/a.ipynb", Path: "a.ipynb"},
		{KernelID: "3f2b0000-0000", Notebook: "/nb/sub/b.ipynb", Path: "sub/b.ipynb"},
		{KernelID: "77770000-0000", Notebook: "/nb/other/b.ipynb", Path: "other/b.ipynb"},
		{KernelID: "88880000-0000"},
	}
	tests := []struct {
		ref, want string
		code      int
	}{
		{"3f2a9c1e-0000", "3f2a9c1e-0000", 0},
		{"3f2a", "3f2a9c1e-0000", 0},
		{"3f2", "", 2}, // ambiguous prefix
		{"/nb/a.ipynb", "3f2a9c1e-0000", 0},
		{"sub/b.ipynb", "3f2b0000-0000", 0},
		{"a.ipynb", "3f2a9c1e-0000", 0},
		{"b.ipynb", "", 2}, // two notebooks named b.ipynb
		{"8888", "88880000-0000", 0},
		{"nope.ipynb", "", 1},
	}
	for _, tt := range tests {
		e, err := matchKernel(es, tt.ref)
		code := 0
		if err != nil {
			code = err.(*ExitError).Code
		}
		if code != tt.code || e.KernelID != tt.want {
			t.Errorf("matchKernel(%q) = %q, exit %d (%v); want %q, exit %d", tt.ref, e.KernelID, code, err, tt.want, tt.code)
		}
	}
}

func TestKernelActionUsage(t *testing.T) {
	env := map[string]string{"JUPYTER_RUNTIME_DIR": t.TempDir(), "JUPYTER_DATA_DIR": t.TempDir(), "VRAMGUARD_HOME": t.TempDir()}
	for _, a := range []string{"interrupt", "restart", "shutdown"} {
		_, errs, code := runJupyterCLI(t, env, "kernels", a)
		if code != 2 || !strings.Contains(errs, "name a notebook") {
			t.Errorf("%s without a target: exit %d %q", a, code, errs)
		}
	}
	if _, errs, code := runJupyterCLI(t, env, "kernels", "shutdown", "--idle-longer-than", "soon"); code != 2 {
		t.Errorf("bad duration: exit %d %q", code, errs)
	}
	// No server: only kernel processes no server lists (if any run on this
	// machine), and nothing matches a notebook.
	out, errs, code := runJupyterCLI(t, env, "kernels", "--json", "--gpu-backend", "none")
	var es []jupyter.Entry
	if err := json.Unmarshal([]byte(out), &es); code != 0 || err != nil || es == nil {
		t.Errorf("kernels --json without servers: exit %d %v %q %q", code, err, out, errs)
	}
	for _, e := range es {
		if e.Server != "" || e.ExecutionState != "unknown" {
			t.Errorf("a kernel from a server that is not there: %+v", e)
		}
	}
	if _, errs, code := runJupyterCLI(t, env, "kernels", "shutdown", "no-such-notebook-7d1e.ipynb", "--gpu-backend", "none"); code != 1 || !strings.Contains(errs, "no running kernel matches") {
		t.Errorf("shutdown of an unknown notebook: exit %d %q", code, errs)
	}
}

func TestDeathNotice(t *testing.T) {
	ctx := context.Background()
	st := testbin.OpenStore(t, t.TempDir())
	now := time.Unix(1_700_000_000, 0)
	add := func(run string, reasons ...string) {
		if err := st.CreateRun(ctx, &store.Run{ID: run, Command: []string{"python"}, Status: store.StatusRunning, StartedAt: now}); err != nil {
			t.Fatal(err)
		}
		for i, r := range reasons {
			st.StartAttempt(ctx, &store.Attempt{RunID: run, N: i + 1, StartedAt: now})
			v, _ := json.Marshal(diagnose.Verdict{Reason: r, Summary: "summary of " + r})
			st.FinishAttempt(ctx, run, i+1, now, 1, r, v)
		}
	}
	add("r-oom", diagnose.Success, diagnose.HostOOMKilled)
	add("r-ok", diagnose.HostOOMKilled, diagnose.Success)
	add("r-int", diagnose.Interrupted)
	add("r-none")
	// a kernel killed while a cell grew its memory
	growth := int64(3 << 30)
	cell := postmortem.Postmortem{Verdict: diagnose.Verdict{Reason: diagnose.HostOOMKilled},
		Kernel: &postmortem.Kernel{CellsTotal: 12, Running: &postmortem.Cell{CellData: timeline.CellData{ExecutionCount: 12, FirstLine: "grow()"}, HostGrowth: &growth}}}
	st.CreateRun(ctx, &store.Run{ID: "r-cell", Command: []string{"python"}, Status: store.StatusRunning, StartedAt: now})
	st.StartAttempt(ctx, &store.Attempt{RunID: "r-cell", N: 1, StartedAt: now})
	v, _ := json.Marshal(cell)
	st.FinishAttempt(ctx, "r-cell", 1, now, 1, diagnose.HostOOMKilled, v)
	st.SetKernel(ctx, "k-cell", "r-cell", "", now)
	saved := &postmortem.Autosave{Path: "/w/autosave-20231114-221000-7.pt", T: now.Add(-250 * time.Second), Objects: []string{"model", "opt"}}
	st.SetKernel(ctx, "k-oom", "r-oom", "/nb/a.ipynb", now)
	st.SetKernel(ctx, "k-ok", "r-ok", "/nb/b.ipynb", now)
	st.SetKernel(ctx, "k-int", "r-int", "", now)
	st.SetKernel(ctx, "k-none", "r-none", "", now)

	tests := []struct {
		kernel, home, want string
		autosave           *postmortem.Autosave
		n                  int
	}{
		{"k-oom", "", "the previous kernel of this notebook died: host_oom_killed (summary of host_oom_killed). Details: vramguard explain r-oom", nil, 2},
		{"k-oom", "/my state", "Details: vramguard --home '/my state' explain r-oom", nil, 2},
		{"k-cell", "", "died: host_oom_killed while In[12] was running (+3 GiB since it started). Details: vramguard explain r-cell", nil, 1},
		{"k-cell", "", "died: host_oom_killed while In[12] was running (+3 GiB since it started). Newest autosave: /w/autosave-20231114-221000-7.pt, 4m10s old (model, opt). Details:", saved, 1},
		{"k-ok", "", "", nil, 0},
		{"k-int", "", "", nil, 0},
		{"k-none", "", "", nil, 0},
	}
	for _, tt := range tests {
		k, err := st.KernelByID(ctx, tt.kernel)
		if err != nil {
			t.Fatal(err)
		}
		line, n := deathNotice(ctx, st, k, tt.home, tt.autosave, now)
		if n != tt.n || (tt.want == "" && line != "") || !strings.Contains(line, tt.want) {
			t.Errorf("%s: %q, %d; want %q, %d", tt.kernel, line, n, tt.want, tt.n)
		}
	}
	// Once announced, not again.
	st.SetKernelNoticed(ctx, "k-oom", 2)
	k, _ := st.KernelByID(ctx, "k-oom")
	if line, _ := deathNotice(ctx, st, k, "", nil, now); line != "" {
		t.Errorf("announced twice: %q", line)
	}
	// A notebook's next kernel finds its previous one; the notebook is kept
	// when a later record does not know it.
	st.SetKernel(ctx, "k-oom", "r-oom", "", now.Add(time.Second))
	if k, err := st.LatestKernelForNotebook(ctx, "/nb/a.ipynb", "k-new"); err != nil || k.KernelID != "k-oom" {
		t.Errorf("LatestKernelForNotebook: %+v %v", k, err)
	}
	if _, err := st.LatestKernelForNotebook(ctx, "/nb/a.ipynb", "k-oom"); err != store.ErrNotFound {
		t.Errorf("LatestKernelForNotebook excluding the only one: %v", err)
	}
}

func TestWithNotice(t *testing.T) {
	ipy := []string{"python", "-m", "ipykernel_launcher", "-f", "/r/kernel-1.json"}
	got := withNotice(ipy)
	if len(got) != len(ipy)+1 || got[len(got)-1] != noticeExtension || len(ipy) != 5 {
		t.Errorf("withNotice(ipykernel) = %q", got)
	}
	if again := withNotice(got); len(again) != len(got) {
		t.Errorf("added twice: %q", again)
	}
	other := []string{"R", "--slave", "-f", "/r/kernel-1.json"}
	if got := withNotice(other); len(got) != len(other) {
		t.Errorf("a non-IPython kernel got the extension: %q", got)
	}
}
