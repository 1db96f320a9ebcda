package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestRun(t *testing.T) {
	for _, tt := range []struct {
		name           string
		script         string
		stdout, stderr string
		code           int
	}{
		{"success", "echo out", "out\n", "", 0},
		{"exit status", "echo out; echo err >&2; exit 3", "out\n", "err\n", 3},
		{"killed by a signal", "echo before >&2; kill -9 $$", "", "before\n", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := Command(t, []string{"PATH=/usr/bin:/bin"}, "sh", "-c", tt.script)
			r := Run(t, cmd)
			if r.Stdout != tt.stdout || r.Stderr != tt.stderr || r.Code != tt.code {
				t.Errorf("Run = stdout %q stderr %q code %d, want %q %q %d", r.Stdout, r.Stderr, r.Code, tt.stdout, tt.stderr, tt.code)
			}
			if r.PID <= 0 || r.PID == os.Getpid() {
				t.Errorf("PID %d", r.PID)
			}
		})
	}
}

func TestCommandEnvIsWhole(t *testing.T) {
	r := Run(t, Command(t, []string{"ONLY=this"}, "/usr/bin/env"))
	if r.Code != 0 || r.Stdout != "ONLY=this\n" {
		t.Errorf("env in the command: exit %d %q, want only ONLY=this", r.Code, r.Stdout)
	}
}

// fakeT records a Fatal and ends the goroutine as testing.T does, so the
// failing paths can be checked without failing this test.
type fakeT struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// inGoroutine runs fn as a test body would run, so Goexit ends only it.
func inGoroutine(fn func()) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	<-done
}

func TestRunFailsWhenTheCommandCannotStart(t *testing.T) {
	f := &fakeT{TB: t}
	inGoroutine(func() { Run(f, exec.Command("/nonexistent/vramguard-test")) })
	if !strings.Contains(f.fatal, "/nonexistent/vramguard-test") {
		t.Errorf("Run of a missing program: fatal %q, want one naming it", f.fatal)
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, 5*time.Second, "the third check", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond checked %d times, want 3 (until it holds)", n)
	}

	f := &fakeT{TB: t}
	logged := false
	start := time.Now()
	inGoroutine(func() {
		WaitFor(f, 100*time.Millisecond, "what never happens", func() bool { return false }, func() { logged = true })
	})
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("gave up after %s, before its 100ms", took)
	}
	if !strings.Contains(f.fatal, "timed out after 100ms waiting for what never happens") || !logged {
		t.Errorf("timeout: fatal %q, onTimeout ran: %v", f.fatal, logged)
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Errorf("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Not yet reaped, the ended child is a zombie, and no longer alive.
	WaitFor(t, 10*time.Second, "the child to end", func() bool { return !Alive(pid) })
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("the zombie is already gone, so this checks nothing: %v", err)
	}
	cmd.Wait()
	if Alive(pid) {
		t.Errorf("reaped child %d is alive", pid)
	}
}

func TestPython(t *testing.T) {
	t.Setenv("VRAMGUARD_TEST_PYTHON", "")
	if p := Python(); p != "/usr/bin/python3" {
		t.Errorf("Python() = %q, want Debian's /usr/bin/python3", p)
	}
	t.Setenv("VRAMGUARD_TEST_PYTHON", "/opt/py/bin/python3")
	if p := Python(); p != "/opt/py/bin/python3" {
		t.Errorf("Python() = %q with VRAMGUARD_TEST_PYTHON set", p)
	}
}

// The binary builds from this package's directory, not only the module
// root's, and runs; a second call does not build again.
func TestVramguard(t *testing.T) {
	cmd := Vramguard(t, nil, "--help")
	r := Run(t, cmd)
	if r.Code != 0 || !strings.Contains(r.Stdout, "vramguard") {
		t.Fatalf("vramguard --help: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if p := Path(t); p != cmd.Path {
		t.Errorf("Path is %s, then %s", cmd.Path, p)
	}
}

// The binary must not link this package (nor testing through it).
func TestNotInTheBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %q; the check would pass on nothing", deps)
	}
	for _, d := range deps {
		if d == "github.com/vramguard/vramguard/internal/testbin" || d == "testing" {
			t.Errorf("vramguard depends on %s", d)
		}
	}
}

func TestResultJSON(t *testing.T) {
	for _, tt := range []struct {
		name   string
		script string
		want   string // the value decoded, or what the failure says
		fails  bool
	}{
		{"report", `echo '{"run_id":"r1"}'`, "r1", false},
		{"failed command", `echo '{"run_id":"r1"}'; echo boom >&2; exit 2`, "sh -c " + `echo '{"run_id":"r1"}'; echo boom >&2; exit 2: exit 2, want 0 and a JSON report` + "\nstderr:\nboom\n", true},
		{"not JSON", `echo usage`, "stdout is not the JSON report", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := Run(t, Command(t, nil, "sh", "-c", tt.script))
			f := &fakeT{TB: t}
			var v struct {
				RunID string `json:"run_id"`
			}
			inGoroutine(func() { r.JSON(f, &v) })
			if tt.fails {
				if !strings.Contains(f.fatal, tt.want) {
					t.Errorf("fatal %q, want it to contain %q", f.fatal, tt.want)
				}
				return
			}
			if f.fatal != "" || v.RunID != tt.want {
				t.Errorf("decoded %+v, fatal %q; want run_id %q", v, f.fatal, tt.want)
			}
		})
	}
}
