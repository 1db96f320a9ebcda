package jupyter

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/procfs"
)

// fakeProcs is a process table for KernelProcs.
type fakeProcs struct {
	procs []procfs.Proc
	argv  map[int][]string
	nspid map[int][]int
	env   map[int][]string
	cwd   map[int]string
	exe   map[int]string
	uid   map[int]int
}

// names is a passwd database for the collector's test.
type names map[int]string

func (n names) Name(uid int) string {
	if s, ok := n[uid]; ok {
		return s
	}
	return strconv.Itoa(uid)
}

func (f fakeProcs) Exe(pid int) (string, error) {
	if e, ok := f.exe[pid]; ok {
		return e, nil
	}
	return "", os.ErrPermission
}

func (f fakeProcs) Environ(pid int) ([]string, error) {
	if e, ok := f.env[pid]; ok {
		return e, nil
	}
	return nil, os.ErrPermission
}
func (f fakeProcs) Cwd(pid int) (string, error) { return f.cwd[pid], nil }

func (f fakeProcs) All() ([]procfs.Proc, error)       { return f.procs, nil }
func (f fakeProcs) Cmdline(pid int) ([]string, error) { return f.argv[pid], nil }
func (f fakeProcs) Status(pid int) (procfs.Status, error) {
	return procfs.Status{NSpid: f.nspid[pid], UID: f.uid[pid]}, nil
}

func kernelArgv(id string) []string {
	return []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/rt/kernel-" + id + ".json"}
}

func TestKernelProcs(t *testing.T) {
	sup := append([]string{"/usr/bin/vramguard", "run", "--kernel", "--"}, kernelArgv("A")...)
	shim := append([]string{"/usr/bin/vramguard", "__shim", "--"}, kernelArgv("A")...)
	src := fakeProcs{
		procs: []procfs.Proc{
			{PID: 10, PPID: 1, Comm: "jupyter-server"},
			// A: supervised; the kernel forked a DataLoader worker.
			{PID: 20, PPID: 10, Comm: "vramguard", StartTicks: 100},
			{PID: 21, PPID: 20, Comm: "vramguard", StartTicks: 101},
			{PID: 22, PPID: 21, Comm: "python3", StartTicks: 102, RSSBytes: 100},
			{PID: 23, PPID: 22, Comm: "pt_data_worker", StartTicks: 150, RSSBytes: 10},
			{PID: 24, PPID: 22, Comm: "python3", StartTicks: 151, RSSBytes: 5},
			// B: plain ipykernel in a container (nested PID namespace).
			{PID: 30, PPID: 10, Comm: "python3", StartTicks: 200, RSSBytes: 50},
			// C: a restart overlaps the dying process; the newest wins.
			{PID: 40, PPID: 10, Comm: "python3", StartTicks: 300},
			{PID: 41, PPID: 10, Comm: "python3", StartTicks: 400},
			// Not a kernel.
			{PID: 50, PPID: 10, Comm: "python3"},
		},
		argv: map[int][]string{
			10: {"jupyter-server"}, 20: sup, 21: shim, 22: kernelArgv("A"), 23: kernelArgv("A"),
			24: {"/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main"},
			30: kernelArgv("B"), 40: kernelArgv("C"), 41: kernelArgv("C"), 50: {"python3", "train.py"},
		},
		nspid: map[int][]int{30: {30, 7}},
	}
	got, err := KernelProcs(src)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		PID, ContainerPID int
		Supervised        bool
		Tree              []int
		RSS               uint64
	}
	simplify := func(k KernelProc) view {
		v := view{PID: k.PID, ContainerPID: k.ContainerPID, Supervised: k.Supervised, RSS: k.RSS()}
		for _, p := range k.Tree {
			v.Tree = append(v.Tree, p.PID)
		}
		return v
	}
	want := map[string]view{
		"A": {PID: 22, Supervised: true, Tree: []int{22, 23, 24}, RSS: 115},
		"B": {PID: 30, ContainerPID: 7, Tree: []int{30}, RSS: 50},
		"C": {PID: 41, Tree: []int{41}},
	}
	if len(got) != len(want) {
		t.Fatalf("found %d kernels, want %d: %+v", len(got), len(want), got)
	}
	for id, w := range want {
		if g := simplify(got[id]); !reflect.DeepEqual(g, w) {
			t.Errorf("kernel %s: %+v, want %+v", id, g, w)
		}
	}
}

// TestKernelProcsByExecutable tells vramguard's processes from kernels by
// the executable they run, not by their names: a supervisor installed under
// another name (here vg-copy) is still no kernel, and a kernel is supervised
// when its environment has the supervisor's run id.
func TestKernelProcsByExecutable(t *testing.T) {
	sup := append([]string{"/opt/bin/vg-copy", "run", "--kernel", "--"}, kernelArgv("A")...)
	shim := append([]string{"/opt/bin/vg-copy", "__shim", "--"}, kernelArgv("A")...)
	conda := append([]string{"/opt/conda/bin/conda", "run", "-n", "torch"}, kernelArgv("B")...)
	src := fakeProcs{
		procs: []procfs.Proc{
			{PID: 10, PPID: 1, Comm: "jupyter-server"},
			// A: under a renamed vramguard; the kernel forked a worker.
			{PID: 20, PPID: 10, Comm: "vg-copy", StartTicks: 100, RSSBytes: 30},
			{PID: 21, PPID: 20, Comm: "vg-copy", StartTicks: 101, RSSBytes: 8},
			{PID: 22, PPID: 21, Comm: "python3", StartTicks: 102, RSSBytes: 100},
			{PID: 23, PPID: 22, Comm: "pt_data_worker", StartTicks: 150, RSSBytes: 10},
			// B: behind another wrapper, in a server that itself runs
			// under vramguard (the run id is inherited, not the kernel's).
			{PID: 30, PPID: 10, Comm: "conda", StartTicks: 200, RSSBytes: 20},
			{PID: 31, PPID: 30, Comm: "python3", StartTicks: 201, RSSBytes: 50},
			// C: a plain kernel of the same server.
			{PID: 40, PPID: 10, Comm: "python3", StartTicks: 300, RSSBytes: 60},
			// D: a supervisor in its first moments: its kernel is not
			// started yet, nor has it named itself vramguard.
			{PID: 50, PPID: 10, Comm: "vg-copy", StartTicks: 400, RSSBytes: 9},
		},
		argv: map[int][]string{10: {"jupyter-server"}, 20: sup, 21: shim, 22: kernelArgv("A"), 23: kernelArgv("A"),
			30: conda, 31: kernelArgv("B"), 40: kernelArgv("C"),
			50: append([]string{"/opt/bin/vg-copy", "run", "--kernel", "--"}, kernelArgv("D")...)},
		exe: map[int]string{20: "8:1000", 21: "8:1000", 22: "8:2000", 23: "8:2000", 30: "8:3000", 31: "8:2000", 40: "8:2000", 50: "8:1000"},
		env: map[int][]string{
			22: {"VRAMGUARD_RUN_ID=20260101-000000-aaaaaa", "VRAMGUARD_ATTEMPT=1"},
			23: {"VRAMGUARD_RUN_ID=20260101-000000-aaaaaa"},
			30: {"VRAMGUARD_RUN_ID=20260101-000000-jupyter"},
			31: {"VRAMGUARD_RUN_ID=20260101-000000-jupyter"},
			40: {"VRAMGUARD_RUN_ID=20260101-000000-jupyter"},
		},
	}
	got, err := KernelProcs(src)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		PID        int
		Supervised bool
		RunID      string
		RSS        uint64
	}
	want := map[string]view{
		"A": {PID: 22, Supervised: true, RunID: "20260101-000000-aaaaaa", RSS: 110},
		"B": {PID: 31, RSS: 50},
		"C": {PID: 40, RSS: 60},
	}
	if len(got) != len(want) {
		t.Fatalf("found %d kernels, want %d: %+v", len(got), len(want), got)
	}
	for id, w := range want {
		k := got[id]
		if g := (view{k.PID, k.Supervised, k.RunID, k.RSS()}); g != w {
			t.Errorf("kernel %s: %+v, want %+v", id, g, w)
		}
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDiscover(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	me := os.Getpid()
	writeJSON(t, filepath.Join(a, "jpserver-1.json"), map[string]any{"url": "http://127.0.0.1:8888/", "base_url": "/", "token": "t1", "pid": me, "port": 8888, "root_dir": "/nb"})
	// A classic notebook server names its root notebook_dir.
	writeJSON(t, filepath.Join(b, "nbserver-2.json"), map[string]any{"url": "http://localhost:9999/lab/", "base_url": "/lab/", "token": "t2", "pid": me, "port": 9999, "notebook_dir": "/home/u"})
	// Stale: its process is gone.
	writeJSON(t, filepath.Join(a, "jpserver-3.json"), map[string]any{"url": "http://127.0.0.1:7777/", "pid": 1 << 30})
	// The same server seen twice (two runtime dirs pointing at one place).
	writeJSON(t, filepath.Join(b, "jpserver-4.json"), map[string]any{"url": "http://127.0.0.1:8888/", "token": "t1", "pid": me})
	os.WriteFile(filepath.Join(a, "jpserver-5.json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(a, "kernel-abc.json"), []byte("{}"), 0o600)

	got, err := Discover([]string{a, b, filepath.Join(a, "missing")})
	if err == nil || !strings.Contains(err.Error(), "jpserver-5.json") {
		t.Errorf("the broken file is not reported: %v", err)
	}
	var urls []string
	for _, s := range got {
		urls = append(urls, s.URL+" "+s.Token+" "+s.RootDir)
	}
	want := []string{"http://127.0.0.1:8888/ t1 /nb", "http://localhost:9999/lab/ t2 /home/u"}
	if !reflect.DeepEqual(urls, want) {
		t.Errorf("servers %q, want %q", urls, want)
	}
}

func TestRuntimeDirs(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{}, []string{"/h/.local/share/jupyter/runtime"}},
		{map[string]string{"XDG_DATA_HOME": "/x"}, []string{"/x/jupyter/runtime"}},
		{map[string]string{"JUPYTER_DATA_DIR": "/d", "JUPYTER_RUNTIME_DIR": "/r"}, []string{"/r", "/d/runtime"}},
		{map[string]string{"JUPYTER_DATA_DIR": "/d", "JUPYTER_RUNTIME_DIR": "/d/runtime"}, []string{"/d/runtime"}},
	}
	for _, tt := range tests {
		if got := RuntimeDirs(env(tt.env), "/h", false); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("RuntimeDirs(%v) = %q, want %q", tt.env, got, tt.want)
		}
	}
}

// fakeServer answers /api/kernels and /api/sessions like jupyter_server,
// and records actions.
func fakeServer(t *testing.T, token string, kernels []Kernel, sessions []Session) (*httptest.Server, *[]string) {
	var actions []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token "+token {
			http.Error(w, `{"message": "Forbidden"}`, http.StatusForbidden)
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/kernels":
			json.NewEncoder(w).Encode(kernels)
		case r.Method == http.MethodGet && r.URL.Path == "/api/sessions":
			json.NewEncoder(w).Encode(sessions)
		case r.Method == http.MethodPost || r.Method == http.MethodDelete:
			actions = append(actions, r.Method+" "+r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &actions
}

func TestCollect(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	kernels := []Kernel{
		{ID: "A", Name: "vramguard", LastActivity: now.Add(-90 * time.Minute), ExecutionState: "idle", Connections: 1},
		{ID: "B", Name: "python3", LastActivity: now.Add(-10 * time.Second), ExecutionState: "busy"},
		{ID: "Z", Name: "python3", LastActivity: now, ExecutionState: "starting"},
		// idle for less than the default window, holding GPU memory
		{ID: "C", Name: "python3", LastActivity: now.Add(-10 * time.Minute), ExecutionState: "idle"},
		// idle long, holding none
		{ID: "D", Name: "python3", LastActivity: now.Add(-2 * time.Hour), ExecutionState: "idle"},
	}
	sessions := []Session{
		{ID: "s1", Path: "proj/a.ipynb", Type: "notebook", Kernel: kernels[0]},
		{ID: "s2", Path: "b.ipynb", Type: "notebook", Kernel: kernels[1]},
	}
	srv, actions := fakeServer(t, "tok", kernels, sessions)
	src := fakeProcs{
		procs: []procfs.Proc{
			{PID: 22, PPID: 1, Comm: "python3", RSSBytes: 1000},
			{PID: 23, PPID: 22, Comm: "python3", RSSBytes: 500},
			{PID: 30, PPID: 1, Comm: "python3", RSSBytes: 200},
			// Kernels no server lists: the notebook comes from their environment.
			{PID: 60, PPID: 1, Comm: "python3", RSSBytes: 300},
			{PID: 70, PPID: 1, Comm: "python3", RSSBytes: 400},
			{PID: 80, PPID: 1, Comm: "python3", RSSBytes: 100},
			{PID: 90, PPID: 1, Comm: "python3", RSSBytes: 100},
		},
		argv: map[int][]string{22: kernelArgv("A"), 23: kernelArgv("A"), 30: kernelArgv("B"), 60: kernelArgv("U"), 70: {"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/other/rt/kernel-V.json"}, 80: kernelArgv("C"), 90: kernelArgv("D")},
		env:  map[int][]string{60: {"HOME=/h", "JPY_SESSION_NAME=proj/u.ipynb"}},
		cwd:  map[int]string{60: "/w/proj"},
		uid:  map[int]int{22: 1001, 23: 1001, 30: 1002, 60: 4242, 70: 0, 80: 1002, 90: 1002},
	}
	u64 := func(v uint64) *uint64 { return &v }
	jobs := []attrib.Job{
		// attrib roots the kernel and its forked worker separately: both count.
		{RootPID: 22, GPUBytes: 3 << 30, AllocatedBytes: u64(1 << 30), ReservedBytes: u64(2 << 30)},
		{RootPID: 23, GPUBytes: 1 << 30},
		{RootPID: 99, GPUBytes: 7 << 30},
		{RootPID: 80, GPUBytes: 2 << 30},
	}
	c := &Collector{Servers: []Server{{URL: srv.URL + "/", BaseURL: "/", Token: "tok", RootDir: "/nb"}}, Procs: src, Jobs: jobs, Now: func() time.Time { return now },
		Users: names{0: "root", 1001: "alice", 1002: "bob"}}
	got, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Notebook, KernelID, State string
		PID                       int
		PIDs                      []int
		GPU, RSS                  uint64
		Alloc                     *uint64
		Idle                      float64
		UID                       int
		User                      string
		IdleHolder                bool
	}
	var rows []row
	for _, e := range got {
		rows = append(rows, row{e.Notebook, e.KernelID, e.ExecutionState, e.PID, e.PIDs, e.GPUBytes, e.RSSBytes, e.AllocatedBytes, e.IdleS, e.UID, e.User, e.Idle})
	}
	want := []row{
		// idle 90 min holding 4 GiB: an idle holder
		{"/nb/proj/a.ipynb", "A", "idle", 22, []int{22, 23}, 4 << 30, 1500, u64(1 << 30), 5400, 1001, "alice", true},
		// idle 10 min: under the default window of 30
		{"", "C", "idle", 80, []int{80}, 2 << 30, 100, nil, 600, 1002, "bob", false},
		{"", "D", "idle", 90, []int{90}, 0, 100, nil, 7200, 1002, "bob", false},
		{"", "V", "unknown", 70, []int{70}, 0, 400, nil, 0, 0, "root", false},
		// a kernel whose process is not found: its owner is unknown
		{"", "Z", "starting", 0, []int{}, 0, 0, nil, 0, -1, "unknown", false},
		{"/nb/b.ipynb", "B", "busy", 30, []int{30}, 0, 200, nil, 10, 1002, "bob", false},
		// a UID without a name is its number
		{"/w/proj/u.ipynb", "U", "unknown", 60, []int{60}, 0, 300, nil, 0, 4242, "4242", false},
	}
	if !reflect.DeepEqual(rows, want) {
		gb, _ := json.Marshal(rows)
		wb, _ := json.Marshal(want)
		t.Fatalf("Collect:\n got %s\nwant %s", gb, wb)
	}

	for _, a := range []string{"interrupt", "restart", "shutdown"} {
		if err := Act(context.Background(), &got[0], a, time.Second); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
	if err := Act(context.Background(), &got[4], "shutdown", time.Second); err != nil {
		t.Fatal(err)
	}
	// A kernel no server lists cannot be acted on through one.
	if err := Act(context.Background(), &got[3], "shutdown", time.Second); err == nil {
		t.Errorf("acted on a kernel without a server")
	}
	wantActions := []string{"POST /api/kernels/A/interrupt", "POST /api/kernels/A/restart", "DELETE /api/sessions/s1", "DELETE /api/kernels/Z"}
	if !reflect.DeepEqual(*actions, wantActions) {
		t.Errorf("actions %q, want %q", *actions, wantActions)
	}

	// A shorter idle window makes the kernel idle for 10 min an idle
	// holder too; the one holding nothing never is.
	c.IdleWindow = 5 * time.Minute
	short, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var holders []string
	for _, e := range short {
		if e.Idle {
			holders = append(holders, e.KernelID)
		}
	}
	if !reflect.DeepEqual(holders, []string{"A", "C"}) {
		t.Errorf("idle holders under a 5 min window: %q, want A and C", holders)
	}
	c.IdleWindow = 0

	// Scoped to runtime directories (kernels --runtime-dir): a kernel no
	// server listed is shown only when its connection file is in one of
	// them; what the servers list is shown as before.
	c.Scope = []string{"/rt"}
	scoped, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range scoped {
		ids = append(ids, e.KernelID)
	}
	if !reflect.DeepEqual(ids, []string{"A", "C", "D", "Z", "B", "U"}) {
		t.Errorf("kernels scoped to /rt: %q, want every listed one and U, not V (of /other/rt)", ids)
	}
	c.Scope = nil

	nb := Notebooks(context.Background(), c.Servers, src, time.Second)
	// each with its kernel's owner: its server's user, or its process's
	wantNB := map[string]OwnedNotebook{"A": {"/nb/proj/a.ipynb", 1001}, "B": {"/nb/b.ipynb", 1002}, "U": {"/w/proj/u.ipynb", 4242}}
	if !reflect.DeepEqual(nb, wantNB) {
		t.Errorf("Notebooks = %v, want %v", nb, wantNB)
	}

	// A wrong token is an error naming the server, not an empty list.
	c.Servers[0].Token = "wrong"
	if _, err := c.Collect(context.Background()); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("wrong token: %v", err)
	}
}

func TestKernelspec(t *testing.T) {
	dir := t.TempDir()
	spec := NewSpec(SpecOptions{Vramguard: "/usr/bin/vramguard", Home: "/state", DisplayName: "Py (vg)", Python: "/usr/bin/python3",
		RunFlags: []string{"--memory-limit", "8g"}, Version: "1.0"})
	wantArgv := []string{"/usr/bin/vramguard", "--home", "/state", "run", "--kernel", "--name", "Py (vg)", "--memory-limit", "8g",
		"--", "/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"}
	if !reflect.DeepEqual(spec.Argv, wantArgv) || spec.InterruptMode != "message" {
		t.Fatalf("spec %+v", spec)
	}
	p, err := Install(dir, "vg", spec)
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	b, _ := os.ReadFile(filepath.Join(p, "kernel.json"))
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Argv, wantArgv) || back.DisplayName != "Py (vg)" {
		t.Fatalf("kernel.json: %v %s", err, b)
	}
	// Reinstalling replaces ours.
	if _, err := Install(dir, "vg", spec); err != nil {
		t.Errorf("reinstall: %v", err)
	}
	// Someone else's kernelspec is neither overwritten nor removed.
	other := filepath.Join(dir, "python3")
	os.MkdirAll(other, 0o755)
	writeJSON(t, filepath.Join(other, "kernel.json"), map[string]any{"argv": []string{"python3"}, "display_name": "Python 3", "language": "python"})
	if _, err := Install(dir, "python3", spec); err == nil {
		t.Errorf("overwrote a foreign kernelspec")
	}
	if err := Uninstall(other); err == nil {
		t.Errorf("removed a foreign kernelspec")
	}
	if _, err := Install(dir, "../evil", spec); err == nil {
		t.Errorf("accepted a name with a path in it")
	}
	found, err := Installed([]string{dir, filepath.Join(dir, "missing")}, "")
	if err != nil || !reflect.DeepEqual(found, []string{p}) {
		t.Errorf("Installed = %q, %v; want [%s]", found, err, p)
	}
	if err := Uninstall(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("%s still exists", p)
	}
	if _, err := os.Stat(filepath.Join(other, "kernel.json")); err != nil {
		t.Errorf("the foreign kernelspec went: %v", err)
	}
}

func TestKernelsDirs(t *testing.T) {
	env := map[string]string{"JUPYTER_PATH": "/p1:/p2", "JUPYTER_DATA_DIR": "/d"}
	got := KernelsDirs(func(k string) string { return env[k] }, "/h", "/venv/share/jupyter/kernels")
	want := []string{"/p1/kernels", "/p2/kernels", "/d/kernels", "/venv/share/jupyter/kernels", "/usr/share/jupyter/kernels", "/usr/local/share/jupyter/kernels"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("KernelsDirs = %q, want %q", got, want)
	}
}
