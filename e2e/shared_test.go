package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
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
	if os.Geteuid() != 0 {
		t.Fatalf("this test adds users and runs processes as them: it must run as root (it does in CI)")
	}
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
