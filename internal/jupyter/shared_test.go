package jupyter_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestKernelActionsThroughSharedAgent: under a root `serve --shared
// --admin-group G`, a user's `vramguard kernels` actions go through the
// agent's socket to the kernel's real jupyter-server: a user outside G may
// not shut down root's kernel (refused, and the kernel still runs), a
// member of G interrupts it and then shuts it down.
func TestKernelActionsThroughSharedAgent(t *testing.T) {
	l := newLab(t)
	a := l.newSharedAgent("vramguard-kernel-actions-")
	l.startServer()
	id, _, _ := l.startKernel("shared.ipynb")
	sfx := strconv.Itoa(os.Getpid() % 100000)
	group := "vgkadm" + sfx
	if out, err := testbin.Accounts("groupadd", group); err != nil {
		t.Fatalf("groupadd %s: %v %s", group, err, out)
	}
	t.Cleanup(func() { testbin.Accounts("groupdel", group) })
	plain, admin := testbin.User(t, "vgkp"+sfx), testbin.User(t, "vgka"+sfx, "-G", group)
	a.serve("--admin-group", group)
	type result struct {
		KernelID string `json:"kernel_id"`
		Done     bool   `json:"done"`
		Error    string `json:"error"`
	}
	one := func(r testbin.Result) result {
		t.Helper()
		var rs []result
		if err := json.Unmarshal([]byte(r.Stdout), &rs); err != nil || len(rs) != 1 {
			t.Fatalf("--json: %v (%d results)\n%s%s", err, len(rs), r.Stdout, r.Stderr)
		}
		return rs[0]
	}

	// a user outside the admin group sees root's kernel under an opaque id,
	// not Jupyter's; named by it, the shutdown is refused and the kernel
	// untouched; Jupyter's id names nothing they can see
	var seen []jupyter.Entry
	r := a.as(plain, "kernels", "--json")
	r.JSON(t, &seen)
	opaque := ""
	for _, e := range seen {
		if e.UID == 0 && e.User == "root" {
			opaque = e.KernelID
		}
	}
	if !strings.HasPrefix(opaque, jupyter.OpaqueKernelPrefix) || strings.Contains(r.Stdout, id) {
		t.Fatalf("uid %d's kernels list root's kernel as %q (Jupyter's id %s shown: %v)\n%s", plain, opaque, id, strings.Contains(r.Stdout, id), r.Stdout)
	}
	r = a.as(plain, "kernels", "shutdown", opaque, "--json")
	if got := one(r); r.Code == 0 || got.KernelID != opaque || got.Done || !strings.Contains(got.Error, "belongs to root") {
		t.Errorf("shutdown of root's kernel by uid %d: exit %d, %+v; want refused, saying whose it is", plain, r.Code, got)
	}
	if r := a.as(plain, "kernels", "shutdown", id); r.Code == 0 || !strings.Contains(r.Stderr, "no running kernel matches") {
		t.Errorf("shutdown by Jupyter's id from uid %d: exit %d\n%s%s", plain, r.Code, r.Stdout, r.Stderr)
	}
	if !l.listed(id) {
		t.Fatal("the refused shutdown shut the kernel down")
	}
	// a member of the admin group: done, through the server
	if r := a.as(admin, "kernels", "interrupt", id, "--json"); r.Code != 0 || !one(r).Done {
		t.Errorf("interrupt by the admin group's uid %d: exit %d\n%s%s", admin, r.Code, r.Stdout, r.Stderr)
	}
	r = a.as(admin, "kernels", "shutdown", id)
	if r.Code != 0 || !strings.Contains(r.Stdout, "shut down") {
		t.Errorf("shutdown by the admin group's uid %d: exit %d\n%s%s", admin, r.Code, r.Stdout, r.Stderr)
	}
	testbin.WaitFor(t, 30*time.Second, "the server to no longer list the kernel", func() bool { return !l.listed(id) })
}

// TestKernelClaimsThroughSharedAgent: a kernel belongs to the user of the
// server that lists it, not to whoever names its connection file. Root's
// real jupyter-server runs a kernel for secret-notebook.ipynb; a throwaway
// user starts two processes that name its connection file on their
// command lines (the server's real path, and a copy of their own under
// the same name), newer than the kernel. Through a root `serve --shared`
// the user's `vramguard kernels` shows root's kernel as root's (opaque id,
// no notebook, no server) and no kernel of theirs under its id, and their
// shutdown by Jupyter's id is refused with the kernel still running.
func TestKernelClaimsThroughSharedAgent(t *testing.T) {
	l := newLab(t)
	a := l.newSharedAgent("vramguard-kernel-claims-")
	l.startServer()
	id, _, _ := l.startKernel("secret-notebook.ipynb")
	uid := testbin.User(t, "vgkc"+strconv.Itoa(os.Getpid()%100000))

	// the user's claims: the server's own connection file, and a copy of
	// their own with the same name
	own := filepath.Join(a.dir, "mine")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(own, uid, uid)
	copyFile := filepath.Join(own, "kernel-"+id+".json")
	if err := os.WriteFile(copyFile, []byte(`{"key": "k", "transport": "tcp", "ip": "127.0.0.1", "shell_port": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(copyFile, uid, uid)
	for _, file := range []string{filepath.Join(l.runtime, "kernel-"+id+".json"), copyFile} {
		c := exec.Command("setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(uid), "--clear-groups",
			python, "-c", "import time; time.sleep(600)", "ipykernel_launcher", "-f", file)
		c.Env = append(os.Environ(), "JPY_SESSION_NAME=mine.ipynb")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}

	a.serve()
	var seen []jupyter.Entry
	r := a.as(uid, "kernels", "--json")
	r.JSON(t, &seen)
	roots := 0
	for _, e := range seen {
		switch {
		case e.UID == 0 && e.User == "root":
			roots++
			if !strings.HasPrefix(e.KernelID, jupyter.OpaqueKernelPrefix) || e.Notebook == "secret-notebook.ipynb" || e.Server != "" {
				t.Errorf("root's kernel as the user sees it: %+v", e)
			}
		case e.KernelID == id:
			t.Errorf("the user's process is listed as root's kernel %s: %+v", id, e)
		}
	}
	// (other tests' kernels of root's may run beside it)
	if roots == 0 || strings.Contains(r.Stdout, "secret-notebook") || strings.Contains(r.Stdout, l.client.Endpoint("")) {
		t.Errorf("the user's kernels list (%d of root's kernels) shows root's notebook or server:\n%s", roots, r.Stdout)
	}
	if r := a.as(uid, "kernels", "shutdown", id); r.Code == 0 {
		t.Errorf("the user's shutdown of root's kernel by its id: exit 0\n%s%s", r.Stdout, r.Stderr)
	}
	if !l.listed(id) {
		t.Fatal("the user's shutdown shut root's kernel down")
	}
}

// startKernel starts a session of notebook (python3 kernel) on the lab's
// server, runs a cell so Jupyter calls the kernel idle after it, and waits
// until the kernel has a process; it returns the kernel's id, its
// connection and its PID.
func (l *lab) startKernel(notebook string) (string, *kernelConn, int) {
	t := l.t
	t.Helper()
	s, err := l.client.CreateSession(context.Background(), notebook, "python3")
	if err != nil {
		t.Fatal(err)
	}
	id := s.Kernel.ID
	k := l.connect(id)
	k.run("x = 1")
	var pid int
	testbin.WaitFor(t, 60*time.Second, "the kernel's process", func() bool {
		pid = l.kernels()[id].PID
		return pid > 0
	})
	return id, k, pid
}

// listed says whether the lab's server lists kernel id.
func (l *lab) listed(id string) bool {
	l.t.Helper()
	var ks []jupyter.Kernel
	if err := l.client.Do(context.Background(), http.MethodGet, "api/kernels", nil, &ks); err != nil {
		l.t.Fatal(err)
	}
	for _, k := range ks {
		if k.ID == id {
			return true
		}
	}
	return false
}

// serve starts vg's serve with args in env, stopped (SIGTERM) when the
// test ends, and returns its stdout and its stderr (logged then, when the
// test failed).
func (l *lab) serve(vg string, env []string, args ...string) (io.Reader, *testbin.Buffer) {
	t := l.t
	t.Helper()
	serve := exec.Command(vg, append([]string{"serve"}, args...)...)
	serve.Env = env
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	serr := &testbin.Buffer{}
	serve.Stderr = serr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", serr.String())
		}
	})
	return stdout, serr
}

// sharedAgent is a root `serve --shared` beside the lab's server, for the
// tests of what its users may see and do: a directory every user may
// enter, a copy of the binary there that they may run, and the agent's
// shared directory (VRAMGUARD_SHARED_DIR). The tests add users and run
// vramguard as them, so they must run as root (they do in CI).
type sharedAgent struct {
	l               *lab
	dir, vg, shared string
}

func (l *lab) newSharedAgent(prefix string) *sharedAgent {
	l.t.Helper()
	testbin.NeedRoot(l.t, "this test adds users and runs vramguard as them")
	a := &sharedAgent{l: l, dir: testbin.SharedDir(l.t, prefix)}
	a.vg, a.shared = testbin.CopyBinary(l.t, l.bin, a.dir), filepath.Join(a.dir, "run")
	return a
}

// serve starts the agent with args added, in the lab's environment, and
// waits for its API socket (mode 0666).
func (a *sharedAgent) serve(args ...string) {
	t := a.l.t
	t.Helper()
	stdout, _ := a.l.serve(a.vg, append(a.l.env(), "VRAMGUARD_HOME="+filepath.Join(a.dir, "agent-home"), "VRAMGUARD_SHARED_DIR="+a.shared),
		append([]string{"--shared", "--listen", "127.0.0.1:0", "--json", "--gpu-backend", "none"}, args...)...)
	go io.Copy(io.Discard, stdout)
	testbin.WaitFor(t, 30*time.Second, "the shared API socket", func() bool {
		st, err := os.Stat(filepath.Join(a.shared, "api.sock"))
		return err == nil && st.Mode().Perm() == 0o666
	})
}

// as runs the binary with args as uid (no other groups), with a home and
// state directory of its own and the agent's shared directory.
func (a *sharedAgent) as(uid int, args ...string) testbin.Result {
	t := a.l.t
	t.Helper()
	home := filepath.Join(a.dir, "home-"+strconv.Itoa(uid))
	os.MkdirAll(home, 0o700)
	os.Chown(home, uid, uid)
	c := testbin.Command(t, []string{"PATH=/usr/bin:/bin", "HOME=" + home, "VRAMGUARD_SHARED_DIR=" + a.shared, "VRAMGUARD_HOME=" + filepath.Join(home, "state")},
		"setpriv", append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), "--clear-groups", a.vg}, args...)...)
	return testbin.Run(t, c)
}
