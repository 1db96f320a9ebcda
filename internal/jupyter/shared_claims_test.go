package jupyter_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
