package jupyter_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	if os.Geteuid() != 0 {
		t.Fatal("this test adds users and runs vramguard as them: it must run as root (it does in CI)")
	}
	l := newLab(t)
	l.startServer()
	ctx := context.Background()
	s, err := l.client.CreateSession(ctx, "shared.ipynb", "python3")
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

	// a directory every user may enter, with a copy of the binary
	dir, err := os.MkdirTemp("", "vramguard-kernel-actions-")
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
	sfx := strconv.Itoa(os.Getpid() % 100000)
	group := "vgkadm" + sfx
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v %s", name, args, err, out)
		}
	}
	run("groupadd", group)
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	uid := func(name string, args ...string) int {
		run("useradd", append([]string{"--no-create-home", "--shell", "/usr/sbin/nologin"}, append(args, name)...)...)
		t.Cleanup(func() { exec.Command("userdel", name).Run() })
		out, err := exec.Command("id", "-u", name).Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	plain, admin := uid("vgkp"+sfx), uid("vgka"+sfx, "-G", group)

	shared := filepath.Join(dir, "run")
	serve := exec.Command(vg, "serve", "--shared", "--listen", "127.0.0.1:0", "--json", "--gpu-backend", "none", "--admin-group", group)
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
	sock := filepath.Join(shared, "api.sock")
	testbin.WaitFor(t, 30*time.Second, "the shared API socket", func() bool {
		st, err := os.Stat(sock)
		return err == nil && st.Mode().Perm() == 0o666
	})
	as := func(uid int, args ...string) testbin.Result {
		t.Helper()
		home := filepath.Join(dir, "home-"+strconv.Itoa(uid))
		os.MkdirAll(home, 0o700)
		os.Chown(home, uid, uid)
		c := testbin.Command(t, []string{"PATH=/usr/bin:/bin", "HOME=" + home, "VRAMGUARD_SHARED_DIR=" + shared, "VRAMGUARD_HOME=" + filepath.Join(home, "state")},
			"setpriv", append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), "--clear-groups", vg}, args...)...)
		return testbin.Run(t, c)
	}
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
	r := as(plain, "kernels", "--json")
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
	r = as(plain, "kernels", "shutdown", opaque, "--json")
	if got := one(r); r.Code == 0 || got.KernelID != opaque || got.Done || !strings.Contains(got.Error, "belongs to root") {
		t.Errorf("shutdown of root's kernel by uid %d: exit %d, %+v; want refused, saying whose it is", plain, r.Code, got)
	}
	if r := as(plain, "kernels", "shutdown", id); r.Code == 0 || !strings.Contains(r.Stderr, "no running kernel matches") {
		t.Errorf("shutdown by Jupyter's id from uid %d: exit %d\n%s%s", plain, r.Code, r.Stdout, r.Stderr)
	}
	if !listed() {
		t.Fatal("the refused shutdown shut the kernel down")
	}
	// a member of the admin group: done, through the server
	if r := as(admin, "kernels", "interrupt", id, "--json"); r.Code != 0 || !one(r).Done {
		t.Errorf("interrupt by the admin group's uid %d: exit %d\n%s%s", admin, r.Code, r.Stdout, r.Stderr)
	}
	r = as(admin, "kernels", "shutdown", id)
	if r.Code != 0 || !strings.Contains(r.Stdout, "shut down") {
		t.Errorf("shutdown by the admin group's uid %d: exit %d\n%s%s", admin, r.Code, r.Stdout, r.Stderr)
	}
	testbin.WaitFor(t, 30*time.Second, "the server to no longer list the kernel", func() bool { return !listed() })
}
