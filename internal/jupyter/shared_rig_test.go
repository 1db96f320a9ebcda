package jupyter_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/testbin"
)

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
