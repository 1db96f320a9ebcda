package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tmuxTop drives `vramguard top` in a detached tmux session of a fixed size.
type tmuxTop struct {
	t    *testing.T
	sock string
}

func (m *tmuxTop) tmux(args ...string) string {
	m.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", m.sock}, args...)...).CombinedOutput()
	if err != nil {
		m.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (m *tmuxTop) screen() string { return m.tmux("capture-pane", "-p", "-t", "top") }

func (m *tmuxTop) keys(k ...string) { m.tmux(append([]string{"send-keys", "-t", "top"}, k...)...) }
func (m *tmuxTop) text(s string)    { m.tmux("send-keys", "-t", "top", "-l", s) }

// waitFor polls the screen until ok accepts it, failing after a deadline.
func (m *tmuxTop) waitFor(what string, ok func(string) bool) string {
	m.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var s string
	for time.Now().Before(deadline) {
		s = m.screen()
		if ok(s) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.t.Fatalf("timed out waiting for %s; screen:\n%s", what, s)
	return ""
}

func screenHas(sub ...string) func(string) bool {
	return func(s string) bool {
		for _, x := range sub {
			if !strings.Contains(s, x) {
				return false
			}
		}
		return true
	}
}

func screenLine(screen, sub string) int {
	for i, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, sub) {
			return i
		}
	}
	return -1
}

const tmuxScenario = `{
  "name": "tmux-test",
  "devices": [{"name": "NVIDIA H100 80GB HBM3", "total": "80GiB", "util": 50}],
  "processes": [
    {"pid": 990001, "device": 0, "memory": "20GiB", "sm_util": 40,
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"], "rss": "2GiB"}},
    {"pid": 990002, "host": {"ppid": 990001, "pgid": 990001, "comm": "pt_data_worker", "cmdline": ["python3", "train.py"], "rss": "300MiB"}},
    {"pid": 990003, "host": {"ppid": 990001, "pgid": 990001, "comm": "pt_data_worker", "cmdline": ["python3", "train.py"], "rss": "310MiB"}},
    {"pid": 990010, "device": 0, "memory": "2GiB",
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "embed.py"], "rss": "8GiB"}},
    {"pid": "$VG_TEST_PID", "device": 0, "memory": "1GiB"}
  ]
}`

// TestTopUnderTmux runs the real binary in tmux against a scenario and a
// real sleep process: it sorts, filters, expands a job to its workers, and
// kills the sleep after confirmation.
func TestTopUnderTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("this test needs tmux (Debian package tmux): %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "vramguard")
	build := exec.Command("go", "build", "-o", bin, "github.com/vramguard/vramguard/cmd/vramguard")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	scen := filepath.Join(dir, "scenario.json")
	if err := os.WriteFile(scen, []byte(tmuxScenario), 0o644); err != nil {
		t.Fatal(err)
	}

	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleep.Wait() }()
	t.Cleanup(func() { sleep.Process.Kill() })

	m := &tmuxTop{t: t, sock: filepath.Join(dir, "tmux.sock")}
	cmdline := fmt.Sprintf("env VG_TEST_PID=%d %s top --simulate %s --kill-grace 3s; sleep 30", sleep.Process.Pid, bin, scen)
	m.tmux("new-session", "-d", "-s", "top", "-x", "220", "-y", "50", cmdline)
	t.Cleanup(func() { exec.Command("tmux", "-S", m.sock, "kill-server").Run() })

	// Sorted by GPU memory: train.py (20 GiB) above embed.py (2 GiB).
	s := m.waitFor("the job list", screenHas("python3 train.py", "python3 embed.py", "sleep", "sort: gpu"))
	if a, b := screenLine(s, "python3 train.py"), screenLine(s, "python3 embed.py"); a < 0 || a > b {
		t.Fatalf("sorted by gpu, train.py (line %d) should be above embed.py (line %d):\n%s", a, b, s)
	}

	// s: sort by host RSS; embed.py (8 GiB) goes above train.py.
	m.keys("s")
	s = m.waitFor("the rss sort", screenHas("sort: rss"))
	if a, b := screenLine(s, "python3 train.py"), screenLine(s, "python3 embed.py"); a < b {
		t.Fatalf("sorted by rss, embed.py (line %d) should be above train.py (line %d):\n%s", b, a, s)
	}

	// Filter to the training job, then expand it to its workers.
	m.keys("/")
	m.text("train")
	m.keys("Enter")
	m.waitFor("the filter", func(s string) bool {
		return strings.Contains(s, "filter: train") && !strings.Contains(s, "embed.py") && !strings.Contains(s, "sleep")
	})
	m.keys("Enter")
	s = m.waitFor("the expanded job", screenHas("990002 pt_data_worker", "990003 pt_data_worker", "990001 python3", "main: python3 train.py"))
	if n := strings.Count(s, "worker: python3 train.py"); n != 2 {
		t.Fatalf("want the 2 workers listed one by one under the job, got %d:\n%s", n, s)
	}

	// Simulated processes are never signalled.
	m.keys("x")
	m.waitFor("the refusal", screenHas("simulated processes are never signalled"))

	// Clear the filter; everything is back.
	m.keys("/", "Escape")
	m.waitFor("the cleared filter", screenHas("filter: -", "python3 embed.py", "sleep"))

	// Kill the real sleep: first decline, then confirm.
	m.keys("/")
	m.text("sleep")
	m.keys("Enter")
	m.waitFor("the sleep job alone", func(s string) bool {
		return strings.Contains(s, "filter: sleep") && !strings.Contains(s, "train.py")
	})
	pid := strconv.Itoa(sleep.Process.Pid)
	m.keys("x")
	m.waitFor("the confirmation", screenHas(`Kill job "sleep"`, "PIDs ["+pid+"]", "[y/N]"))
	m.keys("n")
	m.waitFor("the cancellation", screenHas("kill cancelled"))
	select {
	case err := <-exited:
		t.Fatalf("sleep died although the kill was declined: %v", err)
	default:
	}
	m.keys("x")
	m.waitFor("the confirmation", screenHas("[y/N]"))
	m.keys("y")
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("sleep %s still running after confirming the kill; screen:\n%s", pid, m.screen())
	}
	m.waitFor("the kill report", screenHas("killed job", "["+pid+"] ended after SIGTERM"))

	m.keys("q")
	m.waitFor("top to exit", func(s string) bool { return !strings.Contains(s, "vramguard top") })
}
