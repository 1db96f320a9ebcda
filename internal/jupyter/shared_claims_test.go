package jupyter_test

import (
	"bytes"
	"context"
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
	if os.Geteuid() != 0 {
		t.Fatal("this test adds users and runs vramguard as them: it must run as root (it does in CI)")
	}
	l := newLab(t)
	l.startServer()
	ctx := context.Background()
	s, err := l.client.CreateSession(ctx, "secret-notebook.ipynb", "python3")
	if err != nil {
		t.Fatal(err)
	}
	id := s.Kernel.ID
	l.connect(id).run("x = 1")
	testbin.WaitFor(t, 60*time.Second, "the kernel's process", func() bool { return l.kernels()[id].PID > 0 })
	listed := func() bool {
		var ks []jupyter.Kernel
		if err := l.client.Do(ctx, http.MethodGet, "api/kernels", nil, &ks); err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if k.ID == id {
				return true
			}
		}
		return false
	}
	dir, err := os.MkdirTemp("", "vramguard-kernel-claims-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vg := filepath.Join(dir, "vramguard")
	data, err := os.ReadFile(l.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vg, data, 0o755); err != nil {
		t.Fatal(err)
	}
	name := "vgkc" + strconv.Itoa(os.Getpid()%100000)
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	out, err := exec.Command("id", "-u", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(strings.TrimSpace(string(out)))

	// the user's claims: the server's own connection file, and a copy of
	// their own with the same name
	own := filepath.Join(dir, "mine")
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

	shared := filepath.Join(dir, "run")
	serve := exec.Command(vg, "serve", "--shared", "--listen", "127.0.0.1:0", "--json", "--gpu-backend", "none")
	serve.Env = append(l.env(), "VRAMGUARD_HOME="+filepath.Join(dir, "agent-home"), "VRAMGUARD_SHARED_DIR="+shared)
	var serr bytes.Buffer
	serve.Stderr = &serr
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
	testbin.WaitFor(t, 30*time.Second, "the shared API socket", func() bool {
		st, err := os.Stat(filepath.Join(shared, "api.sock"))
		return err == nil && st.Mode().Perm() == 0o666
	})
	as := func(args ...string) testbin.Result {
		t.Helper()
		home := filepath.Join(dir, "home")
		os.MkdirAll(home, 0o700)
		os.Chown(home, uid, uid)
		c := testbin.Command(t, []string{"PATH=/usr/bin:/bin", "HOME=" + home, "VRAMGUARD_SHARED_DIR=" + shared, "VRAMGUARD_HOME=" + filepath.Join(home, "state")},
			"setpriv", append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), "--clear-groups", vg}, args...)...)
		return testbin.Run(t, c)
	}
	var seen []jupyter.Entry
	r := as("kernels", "--json")
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
	if r := as("kernels", "shutdown", id); r.Code == 0 {
		t.Errorf("the user's shutdown of root's kernel by its id: exit 0\n%s%s", r.Stdout, r.Stderr)
	}
	if !listed() {
		t.Fatal("the user's shutdown shut root's kernel down")
	}
}
