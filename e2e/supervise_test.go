package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBurstThenSIGKILL: a job writes 200 MB of numbered lines as fast as it
// can into a terminal that is not reading, then SIGKILLs itself. Both the log
// and the passed-through output hold every line, in order.
func TestBurstThenSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cmd := exec.Command(bin, "run", "--", python, job("burst.py"), "200")
	cmd.Env = append(os.Environ(), "VRAMGUARD_HOME="+e.home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The "terminal" reads nothing for a second: the pipe fills and the job
	// must wait, not lose lines.
	time.Sleep(time.Second)
	passed := countLines(t, out)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 137 {
		t.Errorf("exit %d, want 137\n%s", code, se.String())
	}
	wrote := 0
	fmt.Sscanf(se.String()[strings.Index(se.String(), "wrote "):], "wrote %d lines", &wrote)
	if wrote == 0 {
		t.Fatalf("job did not report its line count: %s", se.String())
	}
	if passed != wrote {
		t.Errorf("terminal got %d lines, job wrote %d", passed, wrote)
	}
	logs := exec.Command(bin, "logs", "last")
	logs.Env = cmd.Env
	lo, _ := logs.StdoutPipe()
	logs.Start()
	inLog := countLines(t, lo)
	logs.Wait()
	if inLog != wrote {
		t.Errorf("log holds %d lines, job wrote %d", inLog, wrote)
	}
	if pm := e.explain("last"); pm["reason"] != "killed" {
		t.Errorf("reason %v, want killed", pm["reason"])
	}
}

// countLines checks lines are "line %09d ..." numbered 0, 1, 2... and counts them.
func countLines(t *testing.T, r io.Reader) int {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("wrote ")) {
			continue // the job's own count, on stderr
		}
		want := fmt.Sprintf("line %09d ", n)
		if !bytes.HasPrefix(sc.Bytes(), []byte(want)) {
			t.Fatalf("line %d is %q", n, sc.Text()[:min(40, len(sc.Text()))])
		}
		n++
	}
	return n
}

// TestNoOrphansAfterSIGKILL: vramguard is SIGKILLed while its job has
// grandchildren in new sessions; within 2 s none of them remains.
func TestNoOrphansAfterSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd, so, _ := e.start("run", "--", "sh", job("grandchildren.sh"), pidFile)
	waitFor(t, 10*time.Second, "the job to start its grandchildren", func() bool { return strings.Contains(so.String(), "ready") })
	b, _ := os.ReadFile(pidFile)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
	}
	if len(pids) < 3 {
		t.Fatalf("pids: %q", b)
	}
	for _, p := range pids {
		if !alive(p) {
			t.Fatalf("grandchild %d not running before the kill", p)
		}
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	killed := time.Now()
	cmd.Wait()
	waitFor(t, 10*time.Second, "every process of the job to be gone", func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})
	t.Logf("all %d grandchildren gone %s after vramguard was SIGKILLed", len(pids), time.Since(killed).Round(time.Millisecond))
}

// TestNoOrphansAfterExit: when the job's main process exits, what it left
// behind (a daemonised grandchild) is ended too.
func TestNoOrphansAfterExit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r := e.run("run", "--", "sh", "-c", "setsid sleep 300 & echo $! > "+pidFile)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, 10*time.Second, "the daemonised sleep to be gone", func() bool { return !alive(pid) })
}

// TestCrashResume: a job that crashes at random steps, leaving a truncated
// newest checkpoint each time, completes under --restart on-failure by
// resuming from the newest valid checkpoint.
func TestCrashResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ck := t.TempDir()
	r := e.run("run", "--restart", "on-failure", "--max-restarts", "20", "--backoff", "10ms", "--backoff-max", "50ms",
		"--stable-after", "0s", "--resume-from", ck, "--", python, job("crash_resume.py"), ck, "{resume}")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "done at step 12") || !strings.Contains(r.stdout, "resumed from") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "skipped checkpoint") {
		t.Errorf("a truncated newest checkpoint should have been skipped:\n%s", r.stderr)
	}
	pm := e.explain("last")
	if pm["reason"] != "success" || pm["attempts"].(float64) < 2 {
		t.Errorf("reason %v attempts %v", pm["reason"], pm["attempts"])
	}
	for _, a := range pm["attempts_detail"].([]any)[1:] {
		from := a.(map[string]any)["resume_from"].(string)
		if from == "" {
			t.Errorf("attempt %v resumed from nothing", a)
		}
	}
	if eventKinds(pm)["resume_skipped"] == 0 {
		t.Error("no resume_skipped event")
	}
}

// TestNoRetryOfDeterministic: a Python exception is not retried under
// on-failure, and the post-mortem says why.
func TestNoRetryOfDeterministic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run("run", "--restart", "on-failure", "--stable-after", "0s", "--backoff", "10ms", "--", python, "-c", "raise KeyError('x')")
	pm := e.explain("last")
	if pm["attempts"] != float64(1) || !strings.Contains(fmt.Sprint(pm["restart_decision"]), "python_exception") {
		t.Errorf("attempts %v decision %v", pm["attempts"], pm["restart_decision"])
	}
	// A startup failure (before --stable-after) is not retried either.
	e.run("run", "--restart", "on-failure", "--stable-after", "1h", "--", "sh", "-c", "exit 4")
	pm = e.explain("last")
	if pm["attempts"] != float64(1) || !strings.Contains(fmt.Sprint(pm["restart_decision"]), "startup failure") {
		t.Errorf("attempts %v decision %v", pm["attempts"], pm["restart_decision"])
	}
	// --restart always retries it up to --max-restarts.
	e.run("run", "--restart", "always", "--max-restarts", "2", "--backoff", "10ms", "--", "sh", "-c", "exit 4")
	if pm = e.explain("last"); pm["attempts"] != float64(3) {
		t.Errorf("always: attempts %v, want 3", pm["attempts"])
	}
}

// TestDetachLogsStop covers --detach, logs -f, runs, stop and --json.
func TestDetachLogsStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("run", "--detach", "--json", "--name", "bg", "--", "sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done")
	if r.code != 0 {
		t.Fatalf("detach: exit %d: %s", r.code, r.stderr)
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d["id"] == nil {
		t.Fatalf("--detach --json: %v %q", err, r.stdout)
	}
	id := d["id"].(string)

	// logs -f follows the live job until it is stopped.
	follow := exec.Command(bin, "logs", "-f", "bg")
	follow.Env = append(os.Environ(), "VRAMGUARD_HOME="+e.home)
	fo, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(fo)
	for i := 0; i < 5; i++ {
		if !sc.Scan() || sc.Text() != fmt.Sprintf("tick %d", i) {
			t.Fatalf("logs -f line %d: %q", i, sc.Text())
		}
	}
	var runs []map[string]any
	rr := e.run("runs", "--json")
	json.Unmarshal([]byte(rr.stdout), &runs)
	if len(runs) != 1 || runs[0]["id"] != id || runs[0]["status"] != "running" || runs[0]["detached"] != true {
		t.Fatalf("runs --json: %s", rr.stdout)
	}
	if st := e.run("stop", "bg"); st.code != 0 || !strings.Contains(st.stdout, "interrupted") {
		t.Fatalf("stop: %d %s %s", st.code, st.stdout, st.stderr)
	}
	// logs -f returns by itself once the run ended.
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- follow.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("logs -f: %v", err)
		}
	case <-time.After(15 * time.Second):
		follow.Process.Kill()
		t.Fatal("logs -f did not end when the run ended")
	}
	pm := e.explain(id)
	if pm["reason"] != "interrupted" || pm["status"] != "finished" {
		t.Errorf("after stop: reason %v status %v", pm["reason"], pm["status"])
	}
	text := e.run("explain", "bg").stdout
	for _, want := range []string{"reason    interrupted", "memory timeline", "attempts"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain text lacks %q:\n%s", want, text)
		}
	}
	if st := e.run("stop", "bg"); st.code != 1 {
		t.Errorf("stop of a finished run: exit %d, want 1", st.code)
	}
	if r := e.run("logs", "no-such-run"); r.code != 2 || !strings.Contains(r.stderr, "no such run") {
		t.Errorf("unknown run: exit %d %q", r.code, r.stderr)
	}
}

// TestRunJSONAndUsage covers run --json and bad input.
func TestRunJSONAndUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("run", "--json", "--", "sh", "-c", "echo out; exit 5")
	var pm map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &pm); err != nil {
		t.Fatalf("run --json stdout is not one JSON object: %v\n%q", err, r.stdout)
	}
	if r.code != 5 || pm["reason"] != "exit_error" || !strings.Contains(r.stderr, "out") {
		t.Errorf("code %d reason %v stderr %q", r.code, pm["reason"], r.stderr)
	}
	for _, args := range [][]string{
		{"run"},
		{"run", "--restart", "sometimes", "--", "true"},
		{"run", "--memory-limit", "lots", "--", "true"},
		{"run", "--", "/no/such/program"},
		{"run", "--no-such-flag", "--", "true"},
	} {
		r := e.run(args...)
		if r.code != 2 || strings.Contains(r.stderr, "goroutine") || !strings.HasPrefix(r.stderr, "vramguard: ") {
			t.Errorf("%v: exit %d stderr %q", args, r.code, r.stderr)
		}
	}
}
