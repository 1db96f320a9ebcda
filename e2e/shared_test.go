package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/usage"
)

// TestSharedAgent: a root `serve --shared` takes two users' jobs (real
// processes of throwaway users; the GPU side scripted by the simulator);
// each user's own `vramguard top` asks it through the API socket and sees
// their job in full and the other's owner and memory only; the job that
// sits at 0% past the idle window is flagged and its owner's next command
// prints the one line about it.
func TestSharedAgent(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-e2e-")
	ana, ben := m.newUser("vgana"), m.newUser("vgben")
	ana.pid, ben.pid = m.start(ana.uid, nil, "sleep", "600"), m.start(ben.uid, nil, "sleep", "600")
	m.serveTwo("shared", ana, ben, `
		{"pid": "$ANA", "device": 0, "memory": "6GiB", "sm_util": 70},
		{"pid": "$BEN", "device": 0, "memory": "20GiB", "sm_util": 0}`,
		"--idle-window", "2s", "--notify-idle", "3s")
	as := func(u sharedUser, args ...string) (string, string) { return m.as(u.name, u.uid, args...) }
	type snap struct{ Jobs []attrib.Job }
	var s snap
	waitFor(t, 30*time.Second, "both users' jobs through the agent", func() bool {
		out, _ := as(ana, "top", "--once", "--json")
		s = snap{}
		return json.Unmarshal([]byte(out), &s) == nil && len(s.Jobs) == 2
	})
	for _, j := range s.Jobs {
		switch j.UID {
		case ana.uid:
			if j.User != ana.name || j.Name != "sleep" || len(j.Processes) != 1 || j.Processes[0].Comm != "sleep" || j.GPUBytes != 6<<30 {
				t.Errorf("ana's own job as she sees it: %+v", j)
			}
		case ben.uid:
			if j.User != ben.name || j.Name == "sleep" || j.Processes[0].Comm != "" || j.GPUBytes != 20<<30 {
				t.Errorf("ben's job as ana sees it (owner and memory only): %+v", j)
			}
		default:
			t.Errorf("a job of uid %d", j.UID)
		}
	}
	// ben's job sits at 0%: idle after 2 s, its owner told after 3 s; his
	// next command prints the line once, ana's prints none
	var line string
	waitFor(t, 30*time.Second, "ben's notice", func() bool {
		_, errOut := as(ben, "top", "--once", "--mine")
		line = errOut
		return strings.Contains(errOut, "unused for")
	})
	if !strings.Contains(line, "vramguard: sleep (pid "+strconv.Itoa(ben.pid)+") has held 20 GiB on GPU 0 unused for") {
		t.Errorf("ben's notice: %q", line)
	}
	if _, errOut := as(ben, "top", "--once", "--mine"); strings.Contains(errOut, "unused for") {
		t.Errorf("the notice was printed twice: %q", errOut)
	}
	if _, errOut := as(ana, "top", "--once"); strings.Contains(errOut, "unused for") {
		t.Errorf("ana was shown ben's notice: %q", errOut)
	}
	out, _ := as(ben, "top", "--once")
	if !strings.Contains(out, "idle") || !strings.Contains(out, ben.name) {
		t.Errorf("ben's top does not flag his idle job:\n%s", out)
	}
	// ana's report through the socket: her own row only; her job holds a
	// constant 6 GiB at 70%, so its memory-hours are 6 × its held hours,
	// all of them busy
	out, _ = as(ana, "report", "--json", "--since", "1h")
	var rep usage.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Rows) != 1 || rep.Rows[0].Group != ana.name {
		t.Fatalf("ana's report: %v %s", err, out)
	}
	r := rep.Rows[0]
	if r.HeldHours <= 0 || math.Abs(r.MemoryGiBHours-6*r.HeldHours) > 1e-9 || math.Abs(r.BusyHours-r.HeldHours) > 1e-9 || r.IdleHours != 0 || r.PeakBytes != 6<<30 {
		t.Errorf("ana's report row %+v: want memory-hours 6 × held hours, all busy, peak 6 GiB", r)
	}
}

// sharedMachine is a machine shared by throwaway users for the tests of
// `serve --shared`: a directory every user may enter (testbin.SharedDir), a copy
// of the binary there that they may run, and the shared directory
// (VRAMGUARD_SHARED_DIR) of the root agent serve starts.
type sharedMachine struct {
	t      *testing.T
	dir    string
	vg     string
	shared string
	serr   bytes.Buffer // serve's stderr
}

func newSharedMachine(t *testing.T, prefix string) *sharedMachine {
	t.Helper()
	testbin.NeedRoot(t, "this test adds users and runs processes as them")
	m := &sharedMachine{t: t, dir: testbin.SharedDir(t, prefix)}
	m.vg, m.shared = testbin.CopyBinary(t, bin, m.dir), filepath.Join(m.dir, "run")
	return m
}

// user adds a throwaway user, removed after the test, and returns its UID.
func (m *sharedMachine) user(name string) int {
	m.t.Helper()
	return testbin.User(m.t, name)
}

// serve starts the root agent, `serve --shared` with args, its environment
// this process's with env added, and waits for its API socket.
func (m *sharedMachine) serve(env []string, args ...string) {
	m.t.Helper()
	cmd := exec.Command(m.vg, append([]string{"serve", "--shared", "--listen", "127.0.0.1:0", "--json"}, args...)...)
	cmd.Env = append(append(os.Environ(), "VRAMGUARD_HOME="+filepath.Join(m.dir, "agent-home"), "VRAMGUARD_SHARED_DIR="+m.shared), env...)
	cmd.Stderr = &m.serr
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	waitFor(m.t, 30*time.Second, "the shared API socket", func() bool {
		st, err := os.Stat(filepath.Join(m.shared, "api.sock"))
		return err == nil && st.Mode().Perm() == 0o666
	})
}

// asUID is argv run as uid (setpriv: its UID and GID, no other groups).
func asUID(uid int, argv ...string) *exec.Cmd {
	return exec.Command("setpriv", append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), "--clear-groups"}, argv...)...)
}

// start starts argv as uid, in this process's environment with env added,
// killed when the test ends, and returns its PID: a user's job.
func (m *sharedMachine) start(uid int, env []string, argv ...string) int {
	m.t.Helper()
	c := asUID(uid, argv...)
	c.Env = append(os.Environ(), env...)
	if err := c.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c.Process.Pid
}

// kernel starts, as uid, a process with a kernel's command line (its
// connection file, kernel-ID.json in the machine's directory, after -f)
// and its notebook in its environment as a server passes it
// (JPY_SESSION_NAME), killed when the test ends, and returns its PID.
func (m *sharedMachine) kernel(uid int, id, notebook string) int {
	m.t.Helper()
	c := asUID(uid, "/usr/bin/python3", "-c", "import time; time.sleep(600)", "-f", filepath.Join(m.dir, "kernel-"+id+".json"))
	c.Env, c.Dir = append(os.Environ(), "JPY_SESSION_NAME="+notebook), m.dir
	if err := c.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c.Process.Pid
}

// command is the binary with args run as the user (a home and state
// directory of their own, the agent's shared directory).
func (m *sharedMachine) command(name string, uid int, args ...string) *exec.Cmd {
	home := filepath.Join(m.dir, "home-"+name)
	os.MkdirAll(home, 0o700)
	os.Chown(home, uid, uid)
	c := asUID(uid, append([]string{m.vg}, args...)...)
	c.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "VRAMGUARD_SHARED_DIR=" + m.shared, "VRAMGUARD_HOME=" + filepath.Join(home, "state")}
	return c
}

// sharedUser is a throwaway user of a shared machine and the PID of its
// job: the process the scenario charges GPU memory to ($ANA, $BEN).
type sharedUser struct {
	name     string
	uid, pid int
}

// newUser adds a throwaway user named prefix and a suffix of this
// process's PID (test binaries run at once name their own); its job's PID
// is for the caller to set.
func (m *sharedMachine) newUser(prefix string) sharedUser {
	m.t.Helper()
	name := prefix + strconv.Itoa(os.Getpid()%100000)
	return sharedUser{name: name, uid: m.user(name)}
}

// asUser runs the binary with args as u and returns its stdout, failing
// the test when it fails (m.as).
func (m *sharedMachine) asUser(u sharedUser, args ...string) string {
	m.t.Helper()
	out, _ := m.as(u.name, u.uid, args...)
	return out
}

// serveTwo is serveSimulated for the two users of a shared test: in
// processes, "$ANA" and "$BEN" name ana's and ben's jobs.
func (m *sharedMachine) serveTwo(name string, ana, ben sharedUser, processes string, args ...string) {
	m.t.Helper()
	m.serveSimulated(name, processes, []string{fmt.Sprintf("ANA=%d", ana.pid), fmt.Sprintf("BEN=%d", ben.pid)}, args...)
}

// as runs the binary with args as the user and returns its stdout and
// stderr, failing the test when it fails.
func (m *sharedMachine) as(name string, uid int, args ...string) (string, string) {
	m.t.Helper()
	c := m.command(name, uid, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		m.t.Fatalf("%v as %s: %v\n%s%s\nserve: %s", args, name, err, out.String(), errb.String(), m.serr.String())
	}
	return out.String(), errb.String()
}

// serveSimulated starts the agent (serve, with args added) on a simulated
// 80 GiB GPU, scenario name, on which the processes, given as the JSON
// objects of the scenario's "processes" list, hold memory; a process's
// "pid" may name a variable ("$ANA") that env sets.
func (m *sharedMachine) serveSimulated(name, processes string, env []string, args ...string) {
	m.t.Helper()
	scen := filepath.Join(m.dir, "scenario.json")
	data := `{"name": "` + name + `", "duration": "1h",
	  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}],
	  "processes": [` + processes + `]}`
	if err := os.WriteFile(scen, []byte(data), 0o644); err != nil {
		m.t.Fatal(err)
	}
	m.serve(env, append([]string{"--simulate", scen}, args...)...)
}

// TestSharedRunOwners: a run that holds no GPU memory (a job training on
// the CPU, or not yet on a GPU) is still its owner's. Under a root `serve
// --shared` with no GPU at all, root's own supervised run (in the agent's
// state directory) shows root as its owner: in ben's `top --once --json`
// (as "(another user's job)" with its owner, the one thing the shared view
// promises), in root's own, and in root's `report --by user` (its row, no
// "-" row).
func TestSharedRunOwners(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-owners-")
	b := m.newUser("vgoben")
	ben, benUID := b.name, b.uid
	c := exec.Command(m.vg, "run", "--name", "cpu-train", "--gpu-backend", "none", "--", "sleep", "600")
	c.Env = append(os.Environ(), "VRAMGUARD_HOME="+filepath.Join(m.dir, "agent-home"))
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Signal(syscall.SIGTERM); c.Wait() })
	waitFor(t, 20*time.Second, "root's job", func() bool {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(c.Process.Pid)).Output()
		return len(strings.TrimSpace(string(out))) > 0
	})
	m.serve(nil, "--gpu-backend", "none")
	type snap struct{ Jobs []attrib.Job }
	runOf := func(name string, uid int) (attrib.Job, bool) {
		out, _ := m.as(name, uid, "top", "--once", "--json")
		var s snap
		if json.Unmarshal([]byte(out), &s) != nil {
			return attrib.Job{}, false
		}
		for _, j := range s.Jobs {
			if j.Kind == attrib.KindRun || j.Name == "(another user's job)" {
				return j, true
			}
		}
		return attrib.Job{}, false
	}
	var j attrib.Job
	testbin.WaitFor(t, 30*time.Second, "root's run through the agent", func() bool {
		var ok bool
		j, ok = runOf(ben, benUID)
		return ok
	}, func() {
		out, _ := m.as(ben, benUID, "top", "--once", "--json")
		t.Logf("ben's top: %s\nserve: %s", out, m.serr.String())
	})
	if j.User != "root" || j.UID != 0 || j.Name != "(another user's job)" || j.GPUBytes != 0 {
		t.Errorf("root's CPU run as ben sees it: user %q uid %d name %q; want user root, uid 0, its name hidden", j.User, j.UID, j.Name)
	}
	if j, _ := runOf("root", 0); j.User != "root" || j.UID != 0 || j.Name != "cpu-train" {
		t.Errorf("root's CPU run as root sees it: user %q uid %d name %q", j.User, j.UID, j.Name)
	}
	// /metrics (root over the API socket): the run's series carry its user
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(m.shared, "api.sock"))
	}}}
	var metrics string
	testbin.WaitFor(t, 30*time.Second, "the run's series in /metrics", func() bool {
		resp, err := hc.Get("http://agent/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
		return strings.Contains(metrics, `job_name="cpu-train"`)
	}, func() { t.Logf("/metrics:\n%s", metrics) })
	for _, line := range strings.Split(metrics, "\n") {
		if strings.Contains(line, `job_name="cpu-train"`) && !strings.Contains(line, `user="root"`) {
			t.Errorf("a series of root's run without its user: %s", line)
		}
	}
	var rep usage.Report
	testbin.WaitFor(t, 30*time.Second, "root's row in its report", func() bool {
		out, _ := m.as("root", 0, "report", "--by", "user", "--json", "--since", "1h")
		rep = usage.Report{}
		if json.Unmarshal([]byte(out), &rep) != nil {
			return false
		}
		for _, r := range rep.Rows {
			if r.Group == "root" {
				return true
			}
		}
		return false
	}, func() { t.Logf("report: %+v", rep) })
	for _, r := range rep.Rows {
		if r.Group == "-" || r.Group == "" {
			t.Errorf("root's report by user has a row with no user: %+v", r)
		}
	}
}

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

// TestSharedDirRefused: a user prepares the directory a root `serve
// --shared` will make its sockets in (VRAMGUARD_SHARED_DIR): one of their
// own, one every user may write, a symbolic link of theirs to a directory
// of theirs, a directory below one of theirs. serve refuses each (exit 3,
// one line naming the directory and why) and makes no socket there; a
// directory of root's is taken.
func TestSharedDirRefused(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-dir-")
	u := m.newUser("vgdir")
	uid := u.uid
	mkdir := func(p string, mode os.FileMode, owner int) string {
		t.Helper()
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
		return p
	}
	theirs := mkdir(filepath.Join(m.dir, "theirs"), 0o755, uid)
	open := mkdir(filepath.Join(m.dir, "open"), 0o777, 0)
	link := filepath.Join(m.dir, "link")
	if err := os.Symlink(theirs, link); err != nil {
		t.Fatal(err)
	}
	os.Lchown(link, uid, uid)
	below := filepath.Join(mkdir(filepath.Join(m.dir, "parent"), 0o755, uid), "run")
	for _, tt := range []struct{ what, dir, why string }{
		{"another user's directory", theirs, "belongs to uid " + strconv.Itoa(uid)},
		{"a directory every user may write", open, "other users may write"},
		{"a symbolic link", link, "symbolic link"},
		{"below another user's directory", below, "belongs to uid " + strconv.Itoa(uid)},
	} {
		// a serve that takes the directory runs until it is stopped
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, m.vg, "serve", "--shared", "--listen", "127.0.0.1:0", "--gpu-backend", "none")
		cmd.Env = append(os.Environ(), "VRAMGUARD_HOME="+filepath.Join(m.dir, "agent-home"), "VRAMGUARD_SHARED_DIR="+tt.dir)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		msg := strings.TrimSpace(errb.String())
		if code != 3 || !strings.Contains(msg, tt.dir) || !strings.Contains(msg, tt.why) || strings.Count(msg, "\n") > 1 {
			t.Errorf("%s: serve exit %d (%v), stderr %q; want exit 3 naming %s and %q", tt.what, code, err, msg, tt.dir, tt.why)
		}
		for _, s := range []string{"probe.sock", "api.sock"} {
			if _, err := os.Lstat(filepath.Join(tt.dir, s)); err == nil {
				t.Errorf("%s: serve made %s there", tt.what, s)
			}
		}
	}
}

// TestSharedEscapes: a user names their job and their notebook with
// terminal escape sequences (retitle the window, clear the screen, a C1
// CSI, a newline that would start a row of its own); root's `top --once`
// and `kernels` through a root `serve --shared` show them as visible
// escapes, never as the bytes a terminal obeys.
func TestSharedEscapes(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-escapes-")
	u := m.newUser("vgesc")
	uid := u.uid
	const evil = "\x1b]0;pwned\x07\x1b[2J\u009b31m\nroot 1 fake"
	// a job whose command name is the sequence (argv[0])
	job := m.start(uid, []string{"EVIL=" + evil}, "bash", "-c", `exec -a "$EVIL" sleep 600`)
	// a kernel whose notebook (JPY_SESSION_NAME, as a server passes it) is
	kernel := m.kernel(uid, "ee11ee11-0000-4000-8000-0000000000ee", evil+".ipynb")
	m.serveSimulated("escapes", `
		{"pid": "$JOB", "device": 0, "memory": "6GiB", "sm_util": 70},
		{"pid": "$KERNEL", "device": 0, "memory": "2GiB", "sm_util": 0}`,
		[]string{fmt.Sprintf("JOB=%d", job), fmt.Sprintf("KERNEL=%d", kernel)})
	root := func(args ...string) string {
		out, _ := m.as("root", 0, args...)
		return out
	}
	waitFor(t, 30*time.Second, "the user's job and kernel through the agent", func() bool {
		out := root("top", "--once", "--json")
		return strings.Count(out, `"uid": `+strconv.Itoa(uid)) >= 2
	})
	for _, args := range [][]string{{"top", "--once"}, {"top", "--once", "--group"}, {"kernels"}} {
		out := root(args...)
		if strings.ContainsAny(out, "\x1b\x07\u009b") || strings.Contains(out, "\nroot 1 fake") {
			t.Errorf("root's %v passes the user's escape sequences to the terminal:\n%q", args, out)
		}
		if !strings.Contains(out, `\x1b]0;pwned\x07`) {
			t.Errorf("root's %v does not show the user's name as visible escapes:\n%s", args, out)
		}
	}
}
