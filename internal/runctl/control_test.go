package runctl

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestRequestRefusesRunsNotRunning checks what is refused before anything
// is sent.
func TestRequestRefusesRunsNotRunning(t *testing.T) {
	me, err := procfs.FS{}.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  store.Run
		want string
	}{
		{"finished", store.Run{ID: "a", Status: store.StatusFinished, Reason: "success", SupervisorPID: os.Getpid()}, "run a is not running (finished, reason success)"},
		{"lost", store.Run{ID: "b", Status: store.StatusLost, SupervisorPID: os.Getpid()}, "run b is not running (lost, reason -)"},
		{"pid reused", store.Run{ID: "c", Status: store.StatusRunning, SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks + 1}, "the supervisor of run c"},
		{"no pid", store.Run{ID: "d", Status: store.StatusRunning}, "the supervisor of run d (pid 0) is gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Request(procfs.FS{}, &tt.run, OpRestart)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrNotRunning) {
				t.Errorf("got %v, want %q matching ErrNotRunning", err, tt.want)
			}
		})
	}
}

// TestRequestReachesTheSupervisor: each request arrives, in order, on the
// supervisor's socket (this process stands in for it); a socket whose
// other end is not the recorded supervisor, and a run without a socket, get
// nothing; Close removes the socket and the file that names it.
func TestRequestReachesTheSupervisor(t *testing.T) {
	me, err := procfs.FS{}.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(t.TempDir(), "runs", "r1")
	sockDir, err := os.MkdirTemp("", "vg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	c, err := ListenControl(runDir, filepath.Join(sockDir, "r1.ctl"))
	if err != nil {
		t.Fatal(err)
	}
	run := &store.Run{ID: "r1", Status: store.StatusRunning, SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks, Dir: runDir}
	for _, op := range []Op{OpRestart, OpStop, OpKill} {
		if err := Request(procfs.FS{}, run, op); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		select {
		case got := <-c.Requests():
			if got != op {
				t.Errorf("the supervisor got %q, want %q", got, op)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s never reached the supervisor", op)
		}
	}
	// Another live process recorded as the supervisor: the socket's end is
	// not it, so the request is refused.
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	op, err := procfs.FS{}.Proc(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	impostor := *run
	impostor.SupervisorPID, impostor.SupervisorStart = other.Process.Pid, op.StartTicks
	if err := Request(procfs.FS{}, &impostor, OpRestart); err == nil || !strings.Contains(err.Error(), "not the supervisor's") {
		t.Errorf("a request to a socket not the supervisor's: %v", err)
	}
	select {
	case got := <-c.Requests():
		t.Errorf("the socket got %q meant for another supervisor", got)
	default:
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(runDir, ControlFile), filepath.Join(sockDir, "r1.ctl")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s remains after Close: %v", p, err)
		}
	}
	if err := Request(procfs.FS{}, run, OpStop); err == nil || !strings.Contains(err.Error(), "no control socket") {
		t.Errorf("a request to a run without a socket: %v", err)
	}
}

// TestControlRefusesOtherUsers: the supervisor answers only its own user
// and root, by the caller's peer credentials, even where the socket's mode
// would let another user connect (here it is opened to all, and nobody
// connects).
func TestControlRefusesOtherUsers(t *testing.T) {
	testbin.Need(t, testbin.Setpriv)
	testbin.NeedRoot(t, "the test connects as another user")
	dir, err := os.MkdirTemp("", "vg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "r1.ctl")
	c, err := ListenControl(filepath.Join(t.TempDir(), "r1"), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range []string{dir, sock} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	client := `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"op":"restart"}\n')
print(s.makefile().readline().strip())`
	out, err := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", testbin.Python(), "-c", client, sock).CombinedOutput()
	if err != nil {
		t.Fatalf("the client as uid 65534: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"error":"uid 65534 may not control a run of uid 0"`) {
		t.Errorf("the supervisor answered uid 65534: %s", out)
	}
	select {
	case op := <-c.Requests():
		t.Errorf("another user's %q reached the supervisor", op)
	case <-time.After(200 * time.Millisecond):
	}
}
