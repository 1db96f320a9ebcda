package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the side a harness reads (ptmx)
// and the terminal a program runs on.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	return ptmx, tty
}

// syncBuf collects what the terminal shows.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// onTerminal starts vramguard ARGS as the session leader of a new
// terminal that never answers a query, as pty harnesses, `script` under CI
// and serial consoles do, and returns it with what the terminal shows.
func (e *env) onTerminal(args ...string) (*exec.Cmd, *syncBuf) {
	e.t.Helper()
	ptmx, tty := openPTY(e.t)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(e.environ(), "TERM=xterm-256color")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := readPty(ptmx)
	return cmd, out
}

// TestRunOnSilentTerminal (issue #26): on a terminal that never answers,
// `run` starts the job at once and writes no terminal queries (OSC 11 for
// the background colour, DSR for the cursor) that would hold the job 5 s
// and land in transcripts.
func TestRunOnSilentTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// a query unanswered holds the job 5 s: a run that writes none (below)
	// holds it for none, whatever the machine's load
	_, out := e.onTerminal("run", "--", "sh", "-c", "echo job-started; sleep 1")
	waitFor(t, 20*time.Second, "the job's output on the terminal", func() bool { return strings.Contains(out.String(), "job-started") })
	waitFor(t, 20*time.Second, "the run's end", func() bool { return strings.Contains(out.String(), "finished successfully") })
	if s := out.String(); strings.Contains(s, "\x1b]11;?") || strings.Contains(s, "\x1b[6n") {
		t.Errorf("run wrote terminal queries: %q", s)
	}
}

// procState is the state letter of pid in /proc (R, S, T for stopped, ...).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// TestCtrlZStopsTheJob (issue #26): in an interactive shell on a terminal,
// Ctrl-Z stops vramguard and the job with it (the shell says Stopped), and
// fg continues both: the job's output goes on, as for the job run directly.
func TestCtrlZStopsTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ptmx, tty := openPTY(t)
	sh := exec.Command("bash", "--norc", "--noprofile", "-i")
	sh.Env = append(e.environ(), "TERM=xterm-256color", "PS1=$ ")
	sh.Stdin, sh.Stdout, sh.Stderr = tty, tty, tty
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	out := readPty(ptmx)
	ptmx.WriteString(bin + " run --name tick -- sh -c 'i=0; while :; do i=$((i+1)); echo tick$i; sleep 0.1; done'\n")
	var job, sup int
	waitFor(t, 20*time.Second, "the job's ticks and its PIDs", func() bool {
		r := e.run("runs", "--json")
		var runs []struct {
			JobPID        int `json:"job_pid"`
			SupervisorPID int `json:"supervisor_pid"`
		}
		if json.Unmarshal([]byte(r.stdout), &runs) != nil || len(runs) != 1 {
			return false
		}
		job, sup = runs[0].JobPID, runs[0].SupervisorPID
		return job > 0 && strings.Contains(out.String(), "tick3")
	})
	ptmx.WriteString("\x1a") // Ctrl-Z
	waitFor(t, 30*time.Second, "vramguard and the job stopped", func() bool {
		return procState(sup) == "T" && procState(job) == "T" && strings.Contains(out.String(), "Stopped")
	})
	// stopped means stopped: no more ticks
	time.Sleep(300 * time.Millisecond)
	before := strings.Count(out.String(), "tick")
	time.Sleep(500 * time.Millisecond)
	if after := strings.Count(out.String(), "tick"); after != before {
		t.Errorf("the job printed %d ticks while stopped", after-before)
	}
	ptmx.WriteString("fg\n")
	waitFor(t, 10*time.Second, "the job to go on after fg", func() bool {
		return procState(job) != "T" && strings.Count(out.String(), "tick") > before+3
	})
	ptmx.WriteString("\x03") // Ctrl-C ends the run as usual
	waitFor(t, 20*time.Second, "the run's end", func() bool {
		return strings.Contains(out.String(), "post-mortem") || strings.Contains(out.String(), "interrupted")
	})
}

// readPty copies everything the terminal's master side reads into a
// buffer, until it closes.
func readPty(ptmx *os.File) *syncBuf {
	out := &syncBuf{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			out.mu.Lock()
			out.b.Write(buf[:n])
			out.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return out
}
