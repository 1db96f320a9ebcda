package probe

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestSharedSocketHolders: another user holds as many idle connections to
// the shared probe socket (0666) as they can open, more than the server's
// descriptor limit allows. The socket keeps taking probes: this process's
// hello, sent while they hold theirs, is delivered; the holder's
// connections beyond its bound are closed and counted; once they let go,
// probes still come in.
func TestSharedSocketHolders(t *testing.T) {
	uid := throwawayUser(t, "vgholder")
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	low := rl
	low.Cur = 128
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &rl)
	sock := filepath.Join(testbin.SharedDir(t, "vramguard-holders-"), "run", AgentSocketName)
	l, err := ListenShared(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// the holder: 400 connections, each opened and left idle
	holder := exec.Command("/usr/bin/python3", "-c", `
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
held = []
for _ in range(400):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    held.append(s)
print("held", len(held), flush=True)
time.sleep(600)
`, sock)
	holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "held 400") {
		t.Fatalf("the holder: %q", line)
	}
	hello := func(what string) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer c.Close()
		fmt.Fprintf(c, `{"v":1,"type":"hello","pid":%d}`+"\n", os.Getpid())
		deadline := time.After(15 * time.Second)
		for {
			select {
			case m := <-l.Messages():
				if m.Type == TypeHello && m.PeerUID == os.Geteuid() {
					return
				}
			case <-deadline:
				t.Fatalf("%s: no hello delivered (%d connections refused)", what, l.Refused())
			}
		}
	}
	hello("while another user holds 400 connections")
	if l.Refused() == 0 {
		t.Errorf("none of the holder's 400 connections was refused (bound %d)", l.ln.Bound())
	}
	holder.Process.Kill()
	holder.Wait()
	hello("after the holder let go")
}

// TestSharedSocketIdle: a connection to the shared probe socket that sends
// nothing is closed after SharedIdle.
func TestSharedSocketIdle(t *testing.T) {
	defer func(d time.Duration) { SharedIdle = d }(SharedIdle)
	SharedIdle = 300 * time.Millisecond
	sock := filepath.Join(testbin.SharedDir(t, "vramguard-holders-"), "run", AgentSocketName)
	l, err := ListenShared(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("an idle connection is still open after %v: %v", time.Since(start), err)
	}
}
