package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestSharedSocketKernels: GET /api/v1/kernels over the API socket lists
// both users' kernels (real kernel processes of two throwaway users, named
// by their connection files; the GPU memory scripted), each user's own in
// full and the other's owner and memory only; root sees both in full.
func TestSharedSocketKernels(t *testing.T) {
	dir := testbin.SharedDir(t, "vramguard-kernels-")
	aliceID, bobID := "0a1b2c3d-0000-4000-8000-00000000000a", "0b1b2c3d-0000-4000-8000-00000000000b"
	// a kernel's command line: the connection file after -f; its notebook,
	// as a server passes it, is a detail only its owner sees
	kernel := func(id string) rigJob {
		return func(t *testing.T, uid int) (*exec.Cmd, int) {
			c := exec.Command("/usr/bin/python3", "-c", "import time; time.sleep(600)", "-f", filepath.Join(dir, "kernel-"+id+".json"))
			c.Env, c.Dir = append(os.Environ(), "JPY_SESSION_NAME=nb-"+strconv.Itoa(uid)+".ipynb"), dir
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			return c, c.Process.Pid
		}
	}
	sr := newSharedRig(t, Config{KernelDirs: []string{filepath.Join(dir, "no-servers")}}, kernel(aliceID), kernel(bobID))
	alice, bob, aliceN, bobN := sr.alice, sr.bob, sr.aliceN, sr.bobN
	ids := map[int]string{alice: aliceID, bob: bobID}
	pids := map[int]int{alice: sr.sleeps["alice"].Process.Pid, bob: sr.sleeps["bob"].Process.Pid}

	tests := []struct {
		who  string
		uid  int
		full map[int]bool // by the kernel owner's UID: shown in full
	}{
		{"alice", alice, map[int]bool{alice: true, bob: false}},
		{"bob", bob, map[int]bool{alice: false, bob: true}},
		{"root", 0, map[int]bool{alice: true, bob: true}},
	}
	gpu := map[int]uint64{alice: 4 << 30, bob: 8 << 30}
	user := map[int]string{alice: aliceN, bob: bobN}
	for _, tt := range tests {
		t.Run(tt.who, func(t *testing.T) {
			code, body := sr.as(t, tt.uid, "GET /api/v1/kernels")
			if code != 200 {
				t.Fatalf("kernels: %d %s", code, body)
			}
			var got struct{ Kernels []jupyter.Entry }
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			seen := map[int]bool{}
			for _, e := range got.Kernels {
				id, ours := ids[e.UID]
				if !ours {
					continue // a kernel of the machine's own
				}
				seen[e.UID] = true
				if e.PID != pids[e.UID] || e.User != user[e.UID] || e.GPUBytes != gpu[e.UID] {
					t.Errorf("kernel of %s: pid %d user %q gpu %d; want %d %q %d", user[e.UID], e.PID, e.User, e.GPUBytes,
						pids[e.UID], user[e.UID], gpu[e.UID])
				}
				if tt.full[e.UID] && e.KernelID != id {
					t.Errorf("kernel of %s as %s sees it: id %s, want Jupyter's %s", user[e.UID], tt.who, e.KernelID, id)
				}
				if !tt.full[e.UID] {
					// another user's: an opaque id, the same in the next
					// answer, that the kernel actions take (403, not 404)
					if !strings.HasPrefix(e.KernelID, jupyter.OpaqueKernelPrefix) || strings.Contains(body, id) {
						t.Errorf("kernel of %s as %s sees it: id %s (Jupyter's %s in the answer: %v)", user[e.UID], tt.who, e.KernelID, id, strings.Contains(body, id))
					}
					if _, again := sr.as(t, tt.uid, "GET /api/v1/kernels"); !strings.Contains(again, `"kernel_id":"`+e.KernelID+`"`) {
						t.Errorf("the opaque id %s is not in the next answer: %s", e.KernelID, again)
					}
					if code, ans := sr.as(t, tt.uid, "POST /api/v1/kernels/"+e.KernelID+"/shutdown"); code != http.StatusForbidden || !strings.Contains(ans, "belongs to "+user[e.UID]) {
						t.Errorf("shutdown of %s's kernel by its opaque id: %d %s, want 403 naming the owner", user[e.UID], code, ans)
					}
				}
				want := hiddenName
				if tt.full[e.UID] {
					want = filepath.Join(dir, "nb-"+strconv.Itoa(e.UID)+".ipynb")
				}
				if e.Notebook != want {
					t.Errorf("kernel of %s as %s sees it: notebook %q, want %q", user[e.UID], tt.who, e.Notebook, want)
				}
			}
			if !seen[alice] || !seen[bob] {
				t.Fatalf("both users' kernels, want 2: %s", body)
			}
		})
	}
}

// TestKernelActionRefusals: POST /api/v1/kernels/{id}/{action} names what
// it cannot do: no token (401), an action that is none (404), a kernel no
// server or process shows (404). The action itself, and another user's
// refusal over the socket, run against a real jupyter-server in
// internal/jupyter (TestKernelActionsThroughSharedAgent).
func TestKernelActionRefusals(t *testing.T) {
	r := newRig(t, idleKernel, Config{KernelDirs: []string{t.TempDir()}})
	tests := []struct {
		name, path, token string
		code              int
		says              string
	}{
		{"no token", "/api/v1/kernels/9a8b7c6d-0000-4000-8000-000000000001/shutdown", "", 401, ""},
		{"no such action", "/api/v1/kernels/9a8b7c6d-0000-4000-8000-000000000001/delete", r.token, 404, "interrupt, restart or shutdown"},
		{"no such kernel", "/api/v1/kernels/00000000-0000-4000-8000-000000000000/shutdown", r.token, 404, "no kernel 00000000-0000-4000-8000-000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := r.do("POST", tt.path, tt.token, "")
			if code != tt.code || !strings.Contains(body, tt.says) {
				t.Errorf("POST %s: %d %s; want %d saying %q", tt.path, code, body, tt.code, tt.says)
			}
		})
	}
}
