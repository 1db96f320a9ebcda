package jupyter_test

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
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
