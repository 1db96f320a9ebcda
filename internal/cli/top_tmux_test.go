package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/muesli/termenv"

	"github.com/vramguard/vramguard/internal/testbin"
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

// screenMatches is screenHas for regular expressions.
func screenMatches(res ...string) func(string) bool {
	return func(s string) bool {
		for _, x := range res {
			if !regexp.MustCompile(x).MatchString(s) {
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

// TestTopUnderTmux runs the real binary in tmux against scenarios: the
// keys (sort, filter, expand, kill a real sleep after confirmation), and
// golden screens at 80×24 and 200×50. Regenerate the goldens with
// go test ./internal/cli/ -run TestTopUnderTmux -update.
func TestTopUnderTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("this test needs tmux (Debian package tmux): %v", err)
	}
	bin := testbin.Path(t)
	t.Run("keys", func(t *testing.T) { topKeys(t, bin) })
	t.Run("80x24", func(t *testing.T) { topScreens80(t, bin) })
	t.Run("200x50", func(t *testing.T) { topScreens200(t, bin) })
}

// startTop runs `vramguard top ARGS` with env in a fresh tmux server of
// the given size.
func startTop(t *testing.T, bin string, width, height int, env []string, args ...string) *tmuxTop {
	t.Helper()
	testbin.Need(t, testbin.Tmux)
	dir := t.TempDir()
	m := &tmuxTop{t: t, sock: filepath.Join(dir, "tmux.sock")}
	env = append([]string{"VRAMGUARD_HOME=" + filepath.Join(dir, "home")}, env...)
	cmdline := fmt.Sprintf("env %s %s top %s; sleep 30", strings.Join(env, " "), bin, strings.Join(args, " "))
	m.tmux("new-session", "-d", "-s", "top", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), cmdline)
	t.Cleanup(func() { exec.Command("tmux", "-S", m.sock, "kill-server").Run() })
	return m
}

// topKeys sorts, filters, expands a job to its workers, and kills a real
// sleep after confirmation.
func topKeys(t *testing.T, bin string) {
	dir := t.TempDir()
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

	m := startTop(t, bin, 220, 50, []string{fmt.Sprintf("VG_TEST_PID=%d", sleep.Process.Pid)}, "--simulate", scen, "--kill-grace", "3s")

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
	// (PID, then USER: root, the scenario's processes' owner)
	s = m.waitFor("the expanded job", screenMatches(`990002  root +└ worker pt_data_worker: python3 train.py`,
		`990003  root +└ worker pt_data_worker: python3 train.py`, `990001  root +└ main: python3 train.py`))
	// sorted by RSS, the main process (2 GiB) first, then the workers
	// (310 MiB, 300 MiB)
	if a, b, c := screenLine(s, "990001"), screenLine(s, "990003"), screenLine(s, "990002"); !(a < b && b < c) {
		t.Fatalf("the job's processes are not sorted by rss (lines %d, %d, %d):\n%s", a, b, c, s)
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

// topScreens80: at 80 columns, with NO_COLOR, the table drops columns in
// the stated order rather than running off the screen, names the pod and
// the GPU (MIG instance) of each job, sorts across owner kinds, shows the
// orphan's command line; grouped with the pod expanded, it scrolls.
func topScreens80(t *testing.T, bin string) {
	m := startTop(t, bin, 80, 24, []string{"NO_COLOR=1"}, "--simulate", topScenario, "--proc-root", topProcRoot(t))
	m.golden("80x24", screenHas("judging…"))
	if s := m.screenEscapes(); hasColour(s) || !hasSGR(s, func(n int) bool { return n == 7 }) {
		t.Errorf("NO_COLOR: want no colours and the cursor in reverse:\n%q", s)
	}
	m.keys("g", "Enter")
	m.golden("80x24-grouped", screenHas("▾", "more"))
	m.keys("q")
}

// topScreens200: at 200 columns every column shows, in load colours; g
// groups by owner kind (the groups ordered by their GPU memory) and an
// expanded job's processes are sorted too.
func topScreens200(t *testing.T, bin string) {
	// CI=true: a terminal is a terminal inside a CI job too (termenv
	// alone would guess from $CI and drop the colours).
	m := startTop(t, bin, 200, 50, []string{"TERM=tmux-256color", "COLORTERM=truecolor", "CI=true"},
		"--simulate", topScenario, "--proc-root", topProcRoot(t))
	m.golden("200x50", screenHas("judging…"))
	s := m.screenEscapes()
	for _, c := range topLoadColors {
		if want := termenv.TrueColor.Color(c.Dark).Sequence(false); !strings.Contains(s, want) {
			t.Errorf("no %s (%s) on the screen:\n%q", c.Dark, want, s)
		}
	}
	m.keys("g", "Enter")
	m.golden("200x50-grouped", screenHas("▾"))
	m.keys("q")
}

var sgrRE = regexp.MustCompile(`\x1b\[([0-9;:]*)m`)

// hasColour reports whether s sets a foreground or background colour
// (30-37, 38;..., 40-47, 48;..., 90-97, 100-107; not 39 or 49, the
// defaults).
func hasColour(s string) bool {
	return hasSGR(s, func(n int) bool {
		return n >= 30 && n <= 38 || n >= 40 && n <= 48 || n >= 90 && n <= 97 || n >= 100 && n <= 107
	})
}

// hasSGR reports whether a parameter of an SGR sequence in s satisfies ok.
func hasSGR(s string, ok func(int) bool) bool {
	for _, m := range sgrRE.FindAllStringSubmatch(s, -1) {
		for _, p := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ';' || r == ':' }) {
			if n, err := strconv.Atoi(p); err == nil && ok(n) {
				return true
			}
		}
	}
	return false
}

func (m *tmuxTop) screenEscapes() string { return m.tmux("capture-pane", "-p", "-e", "-t", "top") }

var (
	topClockRE = regexp.MustCompile(`\b\d\d:\d\d:\d\d\b`)
	topSparkRE = regexp.MustCompile(`▁+`)
)

// normalScreen is a screen without what changes from run to run: the
// clock, and how many points the (flat) HISTORY sparklines have so far.
func normalScreen(s string) string {
	s = topClockRE.ReplaceAllString(s, "hh:mm:ss")
	s = topSparkRE.ReplaceAllStringFunc(s, func(m string) string {
		return "▁" + strings.Repeat(" ", utf8.RuneCountInString(m)-1)
	})
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n"
}

// golden waits for the screen to be testdata/top/NAME.golden (or, with
// -update, for ready and a steady screen, and writes it there).
func (m *tmuxTop) golden(name string, ready func(string) bool) {
	m.t.Helper()
	path := filepath.Join("testdata", "top", name+".golden")
	if *update {
		s := m.waitFor(name, ready)
		for {
			time.Sleep(500 * time.Millisecond)
			next := m.screen()
			if normalScreen(next) == normalScreen(s) {
				break
			}
			s = next
		}
		if err := os.WriteFile(path, []byte(normalScreen(s)), 0o644); err != nil {
			m.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		m.t.Fatalf("%v (run with -update to write it)", err)
	}
	var got string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got = normalScreen(m.screen()); got == string(want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.t.Fatalf("screen %s differs from %s (run with -update to accept it):\n--- got\n%s--- want\n%s", name, path, got, want)
}
