package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestMain doubles as a helper: with VRAMGUARD_TEST_DIAL=PATH the test
// binary only tries to connect to that socket and write a probe message,
// and exits 0 (written), 13 (permission denied) or 1 (other error). The
// socket test runs it as another user.
func TestMain(m *testing.M) {
	if p := os.Getenv("VRAMGUARD_TEST_DIAL"); p != "" {
		c, err := net.Dial("unix", p)
		if errors.Is(err, syscall.EACCES) {
			os.Exit(13)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(c, `{"v":1,"type":"hello","pid":%d}`+"\n", os.Getpid())
		c.Close()
		os.Exit(0)
	}
	if p := os.Getenv("VRAMGUARD_TEST_API"); p != "" {
		os.Exit(apiHelper(p, os.Getenv("VRAMGUARD_TEST_API_REQ")))
	}
	testbin.Require(testbin.Torch)
	code := m.Run()
	removeTestUsers()
	os.Exit(code)
}

// TestProbeSocketRefusesOtherUsers listens where every user can reach the
// directory, so only the socket's own mode (0600) stands between another
// user and the agent; a helper running as nobody must be refused, and the
// same helper as the owner let in.
func TestProbeSocketRefusesOtherUsers(t *testing.T) {
	// t.TempDir's parent is private to root; this directory must be one
	// that nobody can enter, so only the socket's mode is tested.
	dir := testbin.SharedDir(t, "vramguard-probe-")
	sock := filepath.Join(dir, "probe.sock")
	l, err := probe.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("probe socket mode %v, want a socket with 0600", st.Mode())
	}
	testbin.NeedRoot(t, "this test switches to the user nobody")
	// The test binary may sit in a directory nobody cannot enter; run a copy.
	bin := copyTestBinary(t, dir)
	run := func(uid uint32) int {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "VRAMGUARD_TEST_DIAL="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("helper: %v %s", err, out)
		}
		return 0
	}
	if code := run(65534); code != 13 {
		t.Fatalf("a process of user nobody connecting to the probe socket: exit %d, want 13 (permission denied)", code)
	}
	if code := run(0); code != 0 {
		t.Fatalf("the owner's helper could not connect: exit %d", code)
	}
	select {
	case m := <-l.Messages():
		if m.Type != probe.TypeHello || m.PID != m.PeerPID {
			t.Fatalf("owner's message %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's message never arrived")
	}
}

// TestProbeReportsOnlyAboutItself sends, over a real connection, a sample
// claiming to be another process (refused) and one about itself (used).
func TestProbeReportsOnlyAboutItself(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "p.sock")
	l, err := probe.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := newRig(t, twoJobs, Config{})
	r.ag.cfg.Probes = l.Messages()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { r.ag.followProbes(ctx); close(done) }()

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sample := `{"v":1,"type":"sample","pid":%d,"cuda":[{"device":0,"allocated_bytes":%d,"reserved_bytes":%d}]}` + "\n"
	fmt.Fprintf(c, sample, 960001, 111, 222)      // the trainer's PID: not ours
	fmt.Fprintf(c, sample, os.Getpid(), 333, 444) // our own
	c.Close()
	// The listener reports the disconnect last, after both samples.
	deadline := time.After(10 * time.Second)
	for {
		r.ag.mu.RLock()
		n := r.ag.probeRej + r.ag.probeMsgs
		r.ag.mu.RUnlock()
		if n >= 3 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("messages not processed (%d)", n)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	if r.ag.probeRej != 1 {
		t.Fatalf("refused %d messages, want 1 (the one about pid 960001)", r.ag.probeRej)
	}
	if _, _, ok := r.ag.cfg.Registry.ProbeMemory(960001); ok {
		t.Fatal("a probe reported about another process and was believed")
	}
	// Our own sample was accepted, then forgotten at the disconnect.
	if _, _, ok := r.ag.cfg.Registry.ProbeMemory(os.Getpid()); ok {
		t.Fatal("figures kept after the probe disconnected")
	}
	if r.ag.probeMsgs != 2 {
		t.Fatalf("accepted %d messages, want 2 (own sample, disconnect)", r.ag.probeMsgs)
	}
}
