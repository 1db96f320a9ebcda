package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/users"
)

// apiHelper is the test binary run as another user: it sends req ("METHOD
// PATH") to the agent's API socket at sock and prints the status code, a
// newline and the body.
func apiHelper(sock, req string) int {
	method, path, _ := strings.Cut(req, " ")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	r, err := http.NewRequest(method, "http://agent"+path, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	resp, err := c.Do(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d\n%s", resp.StatusCode, b)
	return 0
}

// testUser adds a throwaway user (removed when the test ends) and returns
// its UID.
// testUsers are the users testUser made, removed when the package's tests
// end (TestMain): removed earlier, a UID would be handed to the next test's
// user while the agent still knows it by the old name (users.DB reads
// /etc/passwd again at most every few seconds, as on a real machine).
var testUsers []string

// rigs counts the sharedRigs made, for their users' names.
var rigs int

func removeTestUsers() {
	for _, name := range testUsers {
		testbin.Accounts("userdel", name)
	}
}

func testUser(t *testing.T, name string) int {
	t.Helper()
	uid := testbin.AddUser(t, name)
	testUsers = append(testUsers, name)
	// The agent names users through users.System(), which reads a changed
	// passwd again within a few seconds: until then a UID another test
	// (in any package) just deleted and useradd gave out again has its old
	// name.
	testbin.WaitFor(t, 10*time.Second, fmt.Sprintf("users.System() to name uid %d %s", uid, name), func() bool {
		return users.System().Name(uid) == name
	}, func() { t.Logf("users.System() names uid %d %q", uid, users.System().Name(uid)) })
	return uid
}

// sharedRig is an agent whose scenario's GPU processes are real processes
// of two throwaway users, with its API on a Unix socket every user may
// reach and a copy of the test binary they may run.
type sharedRig struct {
	*rig
	sock, bin    string
	alice, bob   int
	aliceN, bobN string
	sleeps       map[string]*exec.Cmd
}

// rigJob starts a user's job in a shared rig as uid and returns the
// process to signal and the PID the scenario charges GPU memory to.
type rigJob func(t *testing.T, uid int) (*exec.Cmd, int)

// sleepJob is a user's plain job: sleep 600, holding the GPU memory itself.
func sleepJob(t *testing.T, uid int) (*exec.Cmd, int) {
	c := exec.Command("sleep", "600")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c, c.Process.Pid
}

// newSharedRig starts alice's and bob's jobs (jobs[0] and jobs[1]; missing
// or nil: sleepJob) and the agent over them.
func newSharedRig(t *testing.T, cfg Config, jobs ...rigJob) *sharedRig {
	testbin.NeedRoot(t, "this test adds users and runs processes as them")
	rigs++ // users outlive their test (testUsers): each rig names its own
	sfx := strconv.Itoa(os.Getpid()%100000) + "r" + strconv.Itoa(rigs)
	sr := &sharedRig{aliceN: "vgalice" + sfx, bobN: "vgbob" + sfx, sleeps: map[string]*exec.Cmd{}}
	sr.alice, sr.bob = testUser(t, sr.aliceN), testUser(t, sr.bobN)
	gpuPID := map[string]int{}
	for i, u := range []struct {
		name string
		uid  int
	}{{"alice", sr.alice}, {"bob", sr.bob}} {
		start := sleepJob
		if i < len(jobs) && jobs[i] != nil {
			start = jobs[i]
		}
		c, pid := start(t, u.uid)
		go c.Wait()
		t.Cleanup(func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); c.Process.Kill() })
		sr.sleeps[u.name], gpuPID[u.name] = c, pid
	}
	env := map[string]string{"ALICE": strconv.Itoa(gpuPID["alice"]), "BOB": strconv.Itoa(gpuPID["bob"])}
	sc := `{"name": "shared", "duration": "1h",
	  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}],
	  "processes": [
	    {"pid": "$ALICE", "device": 0, "memory": "4GiB", "sm_util": 50},
	    {"pid": "$BOB", "device": 0, "memory": "8GiB", "sm_util": 0}
	  ]}`
	sr.rig = newRigEnv(t, sc, cfg, nil, func(k string) string { return env[k] })
	// a directory every user can enter, so only the socket's mode and the
	// agent's checks stand between them and the API
	dir := testbin.SharedDir(t, "vramguard-shared-")
	sr.listen(t, dir)
	sr.step(2)
	return sr
}

// listen serves the agent's API socket in dir (a directory every user can
// enter), mode 0666, and copies the test binary there for as to run.
func (sr *sharedRig) listen(t *testing.T, dir string) {
	t.Helper()
	sr.sock = filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sr.sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sr.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: sr.ag.SocketHandler(), ConnContext: sr.ag.ConnContext}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	sr.bin = copyTestBinary(t, dir)
}

// copyTestBinary copies the running test binary into dir (a SharedDir) and
// returns the copy's path: a program every user may run, whose TestMain
// answers the VRAMGUARD_TEST_* helpers (apiHelper, the probe dialer).
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return testbin.CopyBinary(t, self, dir)
}

// as sends req to the API socket from a process of uid, and returns the
// status code and body.
func (sr *sharedRig) as(t *testing.T, uid int, req string) (int, string) {
	t.Helper()
	cmd := exec.Command(sr.bin)
	cmd.Env = append(os.Environ(), "VRAMGUARD_TEST_API="+sr.sock, "VRAMGUARD_TEST_API_REQ="+req)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s as uid %d: %v %s", req, uid, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	code, body, _ := strings.Cut(string(out), "\n")
	n, _ := strconv.Atoi(code)
	return n, body
}

// TestSharedSocketViews: over the API socket each user sees their own job
// in full and the other's owner and memory only, by peer credentials; root
// sees both; /metrics is for admins.
func TestSharedSocketViews(t *testing.T) {
	sr := newSharedRig(t, Config{})
	type view struct {
		user, name string
		gpu        uint64
		procs      int
	}
	tests := []struct {
		who  string
		uid  int
		want map[int]view // by the owner's UID
	}{
		{"alice", sr.alice, map[int]view{sr.alice: {sr.aliceN, "sleep", 4 << 30, 1}, sr.bob: {sr.bobN, hiddenName, 8 << 30, 1}}},
		{"bob", sr.bob, map[int]view{sr.alice: {sr.aliceN, hiddenName, 4 << 30, 1}, sr.bob: {sr.bobN, "sleep", 8 << 30, 1}}},
		{"root", 0, map[int]view{sr.alice: {sr.aliceN, "sleep", 4 << 30, 1}, sr.bob: {sr.bobN, "sleep", 8 << 30, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.who, func(t *testing.T) {
			code, body := sr.as(t, tt.uid, "GET /api/v1/machine")
			if code != 200 {
				t.Fatalf("machine: %d %s", code, body)
			}
			var m Machine
			if err := json.Unmarshal([]byte(body), &m); err != nil {
				t.Fatal(err)
			}
			if len(m.Jobs) != 2 {
				t.Fatalf("%d jobs, want both users' 2: %s", len(m.Jobs), body)
			}
			for _, j := range m.Jobs {
				w, ok := tt.want[j.UID]
				if !ok {
					t.Fatalf("a job of uid %d", j.UID)
				}
				if j.User != w.user || j.Name != w.name || j.GPUBytes != w.gpu || len(j.Processes) != w.procs {
					t.Errorf("job of %s: user %q name %q gpu %d, %d processes; want %+v", w.user, j.User, j.Name, j.GPUBytes, len(j.Processes), w)
				}
				if j.Name == hiddenName && (len(j.Processes[0].Cmdline) > 0 || j.Processes[0].Comm != "") {
					t.Errorf("another user's process shows its command: %+v", j.Processes[0])
				}
			}
			code, body = sr.as(t, tt.uid, "GET /api/v1/jobs")
			var jobs struct{ Jobs []JobView }
			if err := json.Unmarshal([]byte(body), &jobs); code != 200 || err != nil {
				t.Fatalf("jobs: %d %v %s", code, err, body)
			}
			for _, j := range jobs.Jobs {
				if w := tt.want[j.UID]; j.Name != w.name || j.User != w.user || j.GPUBytes != w.gpu {
					t.Errorf("API job of %s: name %q user %q gpu %d; want %+v", j.User, j.Name, j.User, j.GPUBytes, w)
				}
			}
			code, _ = sr.as(t, tt.uid, "GET /metrics")
			if want := map[bool]int{true: 200, false: 403}[tt.uid == 0]; code != want {
				t.Errorf("/metrics: %d, want %d", code, want)
			}
		})
	}
}

// TestSharedSocketActions: kill over the socket needs no token and works
// on one's own job only; another user's is refused and left running; root
// may.
func TestSharedSocketActions(t *testing.T) {
	sr := newSharedRig(t, Config{})
	key := map[int]string{}
	for _, j := range sr.ag.Snapshot().Jobs {
		key[j.UID] = j.Key
	}
	code, body := sr.as(t, sr.alice, "POST /api/v1/jobs/"+key[sr.bob]+"/kill")
	if code != http.StatusForbidden || !strings.Contains(body, sr.bobN) {
		t.Fatalf("alice killing bob's job: %d %s, want 403 naming its owner", code, body)
	}
	time.Sleep(100 * time.Millisecond)
	if err := sr.sleeps["bob"].Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("bob's job is gone after alice's refused kill: %v", err)
	}
	code, body = sr.as(t, sr.alice, "POST /api/v1/jobs/"+key[sr.alice]+"/kill")
	if code != http.StatusAccepted {
		t.Fatalf("alice killing her own job: %d %s", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sr.sleeps["alice"].ProcessState == nil && time.Now().Before(deadline) {
		if syscall.Kill(sr.sleeps["alice"].Process.Pid, 0) != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if syscall.Kill(sr.sleeps["alice"].Process.Pid, 0) == nil {
		// a zombie until reaped still answers signal 0: look at its state
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sr.sleeps["alice"].Process.Pid)); err == nil && !strings.Contains(string(st), ") Z ") {
			t.Fatalf("alice's job still runs after her kill")
		}
	}
	code, body = sr.as(t, 0, "POST /api/v1/jobs/"+key[sr.bob]+"/kill")
	if code != http.StatusAccepted {
		t.Fatalf("root killing bob's job: %d %s", code, body)
	}
}

// TestSharedProbeSocket: on the shared probe socket (0666) another user's
// process is let in, and its messages carry its UID from the kernel.
func TestSharedProbeSocket(t *testing.T) {
	testbin.NeedRoot(t, "this test runs a process as another user")
	uid := testUser(t, "vgprobe"+strconv.Itoa(os.Getpid()%100000))
	dir := testbin.SharedDir(t, "vramguard-shared-probe-")
	sock := filepath.Join(dir, "run", probe.AgentSocketName)
	l, err := probe.ListenShared(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o666 {
		t.Fatalf("shared probe socket: %v %v, want mode 0666", st.Mode(), err)
	}
	cmd := exec.Command(copyTestBinary(t, dir))
	cmd.Env = append(os.Environ(), "VRAMGUARD_TEST_DIAL="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("another user's probe could not connect: %v %s", err, out)
	}
	select {
	case m := <-l.Messages():
		if m.Type != probe.TypeHello || m.PeerUID != uid || m.PID != m.PeerPID || m.PeerPID != cmd.Process.Pid {
			t.Fatalf("message %+v, want a hello from pid %d with the kernel's uid %d", m, cmd.Process.Pid, uid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	if got := (&users.DB{}).Name(uid); !strings.HasPrefix(got, "vgprobe") {
		t.Errorf("the new user's name: %q", got)
	}
}

// TestSharedSocketAdmin: a member of the admin group (Config.Admin, which
// serve --admin-group backs with /etc/group) sees another user's job in
// full and may act on it; the other user still may not act on theirs.
func TestSharedSocketAdmin(t *testing.T) {
	var admin atomic.Int64
	admin.Store(-5)
	sr := newSharedRig(t, Config{Admin: func(uid int) bool { return int64(uid) == admin.Load() }})
	admin.Store(int64(sr.bob))
	key := map[int]string{}
	for _, j := range sr.ag.Snapshot().Jobs {
		key[j.UID] = j.Key
	}
	code, body := sr.as(t, sr.bob, "GET /api/v1/jobs/"+key[sr.alice])
	var j JobView
	if err := json.Unmarshal([]byte(body), &j); code != 200 || err != nil || j.Name != "sleep" || len(j.Processes) != 1 {
		t.Fatalf("the admin's view of alice's job: %d %v %s", code, err, body)
	}
	if code, _ := sr.as(t, sr.bob, "GET /metrics"); code != 200 {
		t.Errorf("the admin's /metrics: %d", code)
	}
	if code, body := sr.as(t, sr.alice, "POST /api/v1/jobs/"+key[sr.bob]+"/kill"); code != http.StatusForbidden {
		t.Fatalf("alice killing the admin's job: %d %s", code, body)
	}
	if code, body := sr.as(t, sr.bob, "POST /api/v1/jobs/"+key[sr.alice]+"/kill"); code != http.StatusAccepted {
		t.Fatalf("the admin killing alice's job: %d %s", code, body)
	}
}

// TestSharedSocketRunDetails: a finished run's post-mortem and its OOM
// snapshot (stacks, paths) are details: over the socket another user gets
// the 404 of a run that does not exist for both, root gets them.
func TestSharedSocketRunDetails(t *testing.T) {
	sr := newSharedRig(t, Config{})
	ctx := context.Background()
	pm, _ := json.Marshal(map[string]any{"probe": map[string]any{"oom": map[string]any{"pid": 1, "t": time.Now(),
		"source": "observer", "snapshot_path": snapFixture}}})
	if err := sr.st.CreateRun(ctx, &store.Run{ID: "oomed", Status: store.StatusRunning, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := sr.st.FinishRun(ctx, "oomed", store.StatusFinished, "cuda_oom", 1, time.Now(), pm); err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"GET /api/v1/runs/oomed", "GET /api/v1/runs/oomed/snapshot?device=0"} {
		// answered as a run that does not exist: no existence oracle
		code, body := sr.as(t, sr.alice, req)
		ncode, nbody := sr.as(t, sr.alice, strings.Replace(req, "oomed", "nosuch", 1))
		if code != http.StatusNotFound || ncode != code || strings.Replace(nbody, "nosuch", "oomed", 1) != body {
			t.Errorf("alice: %s: %d %s; a run that does not exist: %d %s; want the same 404", req, code, body, ncode, nbody)
		}
		if code, body := sr.as(t, 0, req); code != http.StatusOK {
			t.Errorf("root: %s: %d %.200s, want 200", req, code, body)
		}
	}
}

// TestSharedSocketRunKey: another user's supervised run reaches a user
// over the socket under an opaque key (job: and a keyed hash), never its
// run:ID key: no answer that lists jobs carries any part of the run's id
// or name, the opaque key is the same in every answer, and it names the
// job where the API takes a key (the job, its timeline, a refused kill).
// The run's owner and root see run:ID.
func TestSharedSocketRunKey(t *testing.T) {
	sr := newSharedRig(t, Config{})
	const id, name = "r7f3a9c2e51", "bobs-secret-train"
	sr.runs.set(runOf{pid: sr.sleeps["bob"].Process.Pid, id: id, name: name})
	sr.step(3)
	if err := sr.ag.Timelines().Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var real string
	for _, j := range sr.ag.Snapshot().Jobs {
		if j.UID == sr.bob {
			real = j.Key
		}
	}
	if real != "run:"+id {
		t.Fatalf("bob's job has key %q, want run:%s (the hint made it a run)", real, id)
	}
	// every 4-character piece of the id and of the name: none may show
	var pieces []string
	for _, s := range []string{id, name} {
		for i := 0; i+4 <= len(s); i++ {
			pieces = append(pieces, s[i:i+4])
		}
	}
	leaks := func(body string) []string {
		var out []string
		for _, p := range pieces {
			if strings.Contains(body, p) {
				out = append(out, p)
			}
		}
		return out
	}
	// bob's live job's keys in each answer (its pid: key ended when it
	// became a run, and stays in the range as an ended job)
	keysOf := map[string]func(string) []string{
		"GET /api/v1/machine": func(b string) []string {
			var m Machine
			json.Unmarshal([]byte(b), &m)
			var ks []string
			for _, j := range m.Jobs {
				if j.UID == sr.bob {
					ks = append(ks, j.Key)
				}
			}
			return ks
		},
		"GET /api/v1/jobs": func(b string) []string {
			var v struct{ Jobs []JobView }
			json.Unmarshal([]byte(b), &v)
			var ks []string
			for _, j := range v.Jobs {
				if j.UID == sr.bob && j.Live {
					ks = append(ks, j.Key)
				}
			}
			return ks
		},
		"GET /api/v1/timelines?range=1h": func(b string) []string {
			var v struct{ Timelines []Timeline }
			json.Unmarshal([]byte(b), &v)
			var ks []string
			for _, tl := range v.Timelines {
				if tl.Name == hiddenName && tl.Live {
					ks = append(ks, tl.Key)
				}
			}
			return ks
		},
		"GET /api/v1/devices": func(b string) []string {
			var v struct {
				Devices []struct{ Jobs []string }
			}
			json.Unmarshal([]byte(b), &v)
			var ks []string
			for _, d := range v.Devices {
				for _, k := range d.Jobs {
					if !strings.HasPrefix(k, "pid:") { // alice's own
						ks = append(ks, k)
					}
				}
			}
			return ks
		},
	}
	opaque := ""
	for req, keys := range keysOf {
		code, body := sr.as(t, sr.alice, req)
		if code != 200 {
			t.Fatalf("alice: %s: %d %s", req, code, body)
		}
		if l := leaks(body); len(l) > 0 {
			t.Errorf("alice: %s shows pieces %q of bob's run id %s or name %s:\n%s", req, l, id, name, body)
		}
		ks := keys(body)
		if len(ks) != 1 || !strings.HasPrefix(ks[0], opaquePrefix) {
			t.Errorf("alice: %s: bob's job under keys %q, want one %s key", req, ks, opaquePrefix)
			continue
		}
		if opaque == "" {
			opaque = ks[0]
		} else if ks[0] != opaque {
			t.Errorf("alice: %s: bob's job is %q, elsewhere %q: the key is not stable", req, ks[0], opaque)
		}
	}
	if opaque == "" {
		t.Fatal("no opaque key for bob's job")
	}
	// the opaque key names the job where the API takes a key
	code, body := sr.as(t, sr.alice, "GET /api/v1/jobs/"+opaque)
	var j JobView
	if err := json.Unmarshal([]byte(body), &j); code != 200 || err != nil || j.UID != sr.bob || j.Key != opaque || j.GPUBytes != 8<<30 || j.Name != hiddenName {
		t.Errorf("alice: GET /api/v1/jobs/%s: %d %v %s", opaque, code, err, body)
	}
	if l := leaks(body); len(l) > 0 {
		t.Errorf("alice: GET /api/v1/jobs/%s shows %q: %s", opaque, l, body)
	}
	code, body = sr.as(t, sr.alice, "GET /api/v1/timelines?range=1h&job="+opaque)
	var tls struct{ Timelines []Timeline }
	if err := json.Unmarshal([]byte(body), &tls); code != 200 || err != nil || len(tls.Timelines) != 1 || tls.Timelines[0].Key != opaque ||
		len(tls.Timelines[0].GPU) == 0 || tls.Timelines[0].GPU[len(tls.Timelines[0].GPU)-1] != 8<<30 {
		t.Errorf("alice: bob's timeline by its opaque key: %d %v %s", code, err, body)
	}
	code, body = sr.as(t, sr.alice, "POST /api/v1/jobs/"+opaque+"/kill")
	if code != http.StatusForbidden || !strings.Contains(body, sr.bobN) || len(leaks(body)) > 0 {
		t.Errorf("alice killing bob's job by its opaque key: %d %s, want 403 naming its owner and not its run", code, body)
	}
	if code, body := sr.as(t, sr.alice, "GET /api/v1/jobs/job:0000000000000000"); code != http.StatusNotFound {
		t.Errorf("an opaque key no job has: %d %s, want 404", code, body)
	}
	// the run's owner and root see its key
	for _, who := range []struct {
		name string
		uid  int
	}{{"bob", sr.bob}, {"root", 0}} {
		code, body := sr.as(t, who.uid, "GET /api/v1/jobs")
		var v struct{ Jobs []JobView }
		if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
			t.Fatalf("%s: jobs: %d %v %s", who.name, code, err, body)
		}
		found := false
		for _, j := range v.Jobs {
			found = found || (j.Key == real && j.RunID == id)
		}
		if !found {
			t.Errorf("%s does not see bob's run as %s: %s", who.name, real, body)
		}
	}
}

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
