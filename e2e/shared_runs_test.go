package e2e

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestSharedRuns: two users' `vramguard run` jobs (real supervised runs of
// throwaway users, the GPU side scripted by the simulator) under a root
// `serve --shared`: each user's `runs --all-users` lists both through the
// agent's socket, their own with its id and name, the other's with owner,
// process and memory only; plain `runs` stays their own state directory.
func TestSharedRuns(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-runs-")
	// each user's run: a sleep under `vramguard run --name NAME-train`
	runOf := func(u sharedUser) string { return u.name + "-train" }
	command := func(u sharedUser, args ...string) *exec.Cmd { return m.command(u.name, u.uid, args...) }
	mk := func(prefix string) sharedUser {
		u := m.newUser(prefix)
		c := command(u, "run", "--name", runOf(u), "--gpu-backend", "none", "--", "sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Signal(syscall.SIGTERM); c.Wait() })
		waitFor(t, 20*time.Second, u.name+"'s job", func() bool {
			out, _ := exec.Command("pgrep", "-u", strconv.Itoa(u.uid), "-x", "sleep").Output()
			u.pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
			return u.pid > 0
		})
		return u
	}
	ana, ben := mk("vgrana"), mk("vgrben")
	m.serveTwo("shared runs", ana, ben, `
		{"pid": "$ANA", "device": 0, "memory": "6GiB", "sm_util": 70},
		{"pid": "$BEN", "device": 0, "memory": "20GiB", "sm_util": 30}`)
	as := m.asUser
	type run struct {
		User     string `json:"user"`
		RunID    string `json:"run_id"`
		Name     string `json:"name"`
		PID      int    `json:"pid"`
		GPUBytes uint64 `json:"gpu_bytes"`
	}
	byUser := func(u sharedUser) map[string]run {
		var rs []run
		if out := as(u, "runs", "--all-users", "--json"); json.Unmarshal([]byte(out), &rs) != nil {
			t.Fatalf("runs --all-users --json as %s: %s", u.name, out)
		}
		m := map[string]run{}
		for _, r := range rs {
			m[r.User] = r
		}
		return m
	}
	testbin.WaitFor(t, 30*time.Second, "both users' runs through the agent", func() bool {
		m := byUser(ana)
		return m[ana.name].GPUBytes > 0 && m[ben.name].GPUBytes > 0
	}, func() {
		t.Logf("runs --all-users: %s\ntop: %s", as(ana, "runs", "--all-users", "--json"), as(ana, "top", "--once", "--json"))
	})
	ownID := map[string]string{}
	for _, u := range []sharedUser{ana, ben} {
		var own []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		}
		if out := as(u, "runs", "--json"); json.Unmarshal([]byte(out), &own) != nil || len(own) != 1 || own[0].Name != runOf(u) {
			t.Fatalf("%s's own runs: %s", u.name, out)
		}
		ownID[u.name] = own[0].ID
	}
	// noID: id (of owner's run) shows nowhere u reads what every user
	// reads of the machine: socket paths (/proc/net/unix, where each
	// supervisor's probe socket is) and command lines (ps)
	noID := func(u sharedUser, owner, id string) {
		t.Helper()
		for _, argv := range [][]string{{"cat", "/proc/net/unix"}, {"ps", "-eo", "args"}} {
			b, err := asUID(u.uid, argv...).Output()
			if err != nil {
				t.Fatalf("%v as %s: %v", argv, u.name, err)
			}
			if strings.Contains(string(b), id) || strings.Contains(string(b), id[16:]) {
				t.Errorf("%s's %v shows %s's run id %s", u.name, argv, owner, id)
			}
		}
	}
	gpu := map[string]uint64{ana.name: 6 << 30, ben.name: 20 << 30}
	for _, u := range []sharedUser{ana, ben} {
		m := byUser(u)
		for _, o := range []sharedUser{ana, ben} {
			r := m[o.name]
			id, name := "", "(another user's job)"
			if o.uid == u.uid {
				id, name = ownID[o.name], runOf(o)
			}
			if r.RunID != id || r.Name != name || r.GPUBytes != gpu[o.name] || r.PID <= 0 {
				t.Errorf("%s's run as %s sees it: %+v; want id %q, name %q, %d GPU bytes", o.name, u.name, r, id, name, gpu[o.name])
			}
		}
		other := map[string]sharedUser{ana.name: ben, ben.name: ana}[u.name]
		// the other's run id reaches u nowhere: not as its job's key
		// (run:ID) in top's JSON, nor in runs --all-users'
		for _, args := range [][]string{{"top", "--once", "--json"}, {"runs", "--all-users", "--json"}} {
			out := as(u, args...)
			if strings.Contains(out, ownID[other.name]) || strings.Contains(out, runOf(other)) {
				t.Errorf("%s's %v shows %s's run %s (%s):\n%s", u.name, args, other.name, ownID[other.name], runOf(other), out)
			}
		}
		if out := as(u, "top", "--once", "--json"); !strings.Contains(out, `"run:`+ownID[u.name]+`"`) {
			t.Errorf("%s's top --once --json lacks their own run's key run:%s:\n%s", u.name, ownID[u.name], out)
		}
		noID(u, other.name, ownID[other.name])
		out := as(u, "runs", "--all-users")
		if !strings.Contains(out, other.name) || !strings.Contains(out, "20 GiB") || strings.Contains(out, runOf(other)) {
			t.Errorf("%s's runs --all-users table:\n%s", u.name, out)
		}
	}
	// a detached run's background supervisor: its id neither
	out := strings.TrimSpace(as(ana, "run", "--detach", "--gpu-backend", "none", "--", "sleep", "600"))
	bg := strings.Fields(out)
	if len(bg) == 0 {
		t.Fatalf("run --detach: %q", out)
	}
	t.Cleanup(func() { m.command(ana.name, ana.uid, "stop", bg[0]).Run() })
	noID(ben, ana.name, bg[0])
}
