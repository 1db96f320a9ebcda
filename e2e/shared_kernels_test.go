package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/jupyter"
)

// TestSharedKernels: under a root `serve --shared`, each of two users'
// `vramguard kernels` lists both users' kernels (real kernel processes of
// throwaway users, found by their connection files; the GPU memory
// scripted) through the agent's socket: their own with its notebook, the
// other's owner and memory only; the one at 0% past the idle window is
// flagged idle.
func TestSharedKernels(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-kernels-")
	ana, ben := m.newUser("vgkana"), m.newUser("vgkben")
	kernel := map[string]string{ana.name: "aa11aa11-0000-4000-8000-0000000000aa", ben.name: "bb22bb22-0000-4000-8000-0000000000bb"}
	ana.pid = m.kernel(ana.uid, kernel[ana.name], ana.name+".ipynb")
	ben.pid = m.kernel(ben.uid, kernel[ben.name], ben.name+".ipynb")
	m.serveTwo("shared kernels", ana, ben, `
		{"pid": "$ANA", "device": 0, "memory": "6GiB", "sm_util": 70},
		{"pid": "$BEN", "device": 0, "memory": "20GiB", "sm_util": 0}`, "--idle-window", "1s")
	as := m.asUser
	type entry struct {
		Notebook string `json:"notebook"`
		KernelID string `json:"kernel_id"`
		PID      int    `json:"pid"`
		User     string `json:"user"`
		GPUBytes uint64 `json:"gpu_bytes"`
		Idle     bool   `json:"idle"`
	}
	byPID := func(out string) map[int]entry {
		var es []entry
		if err := json.Unmarshal([]byte(out), &es); err != nil {
			t.Fatalf("kernels --json: %v\n%s", err, out)
		}
		m := map[int]entry{}
		for _, e := range es {
			m[e.PID] = e
		}
		return m
	}
	var got map[int]entry
	// ben's kernel sits at 0%: idle after the agent's 1 s window
	waitFor(t, 30*time.Second, "both users' kernels, ben's idle, through the agent", func() bool {
		got = byPID(as(ana, "kernels", "--json"))
		return got[ana.pid].GPUBytes > 0 && got[ben.pid].Idle
	})
	for _, u := range []sharedUser{ana, ben} {
		es := byPID(as(u, "kernels", "--json"))
		for _, o := range []sharedUser{ana, ben} {
			e := es[o.pid]
			// another user's kernel: no notebook, and an opaque id
			// rather than Jupyter's
			nb, idOK := "(another user's job)", strings.HasPrefix(e.KernelID, jupyter.OpaqueKernelPrefix)
			if o.uid == u.uid {
				nb, idOK = filepath.Join(m.dir, o.name+".ipynb"), e.KernelID == kernel[o.name]
			}
			gpu := map[int]uint64{ana.pid: 6 << 30, ben.pid: 20 << 30}[o.pid]
			if !idOK || e.User != o.name || e.GPUBytes != gpu || e.Notebook != nb || e.Idle != (o.uid == ben.uid) {
				t.Errorf("%s's kernel as %s sees it: %+v; want kernel %s (an opaque id for another user's), user %s, %d bytes, notebook %q, idle %v",
					o.name, u.name, e, kernel[o.name], o.name, gpu, nb, o.uid == ben.uid)
			}
		}
	}
	// the table: ana's own notebook, ben's kernel flagged idle by owner
	out := as(ana, "kernels")
	for _, want := range []string{ana.name + ".ipynb", ben.name, "20 GiB", "idle"} {
		if !strings.Contains(out, want) {
			t.Errorf("ana's kernels table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, ben.name+".ipynb") || strings.Contains(out, kernel[ben.name][:8]) {
		t.Errorf("ana's table shows ben's notebook:\n%s", out)
	}
}
