package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holdWriteLock makes another process hold a write transaction on the
// state database of home until release is called.
func holdWriteLock(t *testing.T, home string) (release func()) {
	t.Helper()
	cmd := exec.Command(python, "-c", `
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
con.execute("BEGIN IMMEDIATE")
con.execute("UPDATE runs SET name=name")
print("locked", flush=True)
sys.stdin.read()
con.execute("ROLLBACK")
`, filepath.Join(home, "vramguard.db"))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "locked\n" {
		cmd.Process.Kill()
		t.Fatalf("the locker did not take the lock: %q", line)
	}
	released := false
	release = func() {
		if !released {
			released = true
			in.Close()
			cmd.Wait()
		}
	}
	t.Cleanup(release)
	return release
}

// TestRunWithLockedStore (issue #26): another process holding a write
// transaction on the state database does not keep the job from starting
// (before: exit 2 after 10 s); vramguard says once that it could not
// record the run there, records it elsewhere, and once the lock is gone,
// records it in the state directory when the run ends.
func TestRunWithLockedStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--", "true"); r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	release := holdWriteLock(t, e.home)
	start := time.Now()
	cmd, so, se := e.start("run", "--name", "locked", "--", "sh", "-c", "echo job-ran; sleep 2; echo job-done")
	waitFor(t, 20*time.Second, "the job's output", func() bool { return strings.Contains(so.String(), "job-ran") })
	// a run that waited on the lock would wait the store's busy timeout
	// (10 s) before it gave up on it: the job's line comes before that
	if d := time.Since(start); d >= 10*time.Second {
		t.Errorf("the job's first line came after %s, the store's lock wait: the job waited on the lock", d.Round(time.Millisecond))
	}
	release()
	if code := exitCode(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want the job's 0\nstderr:\n%s", code, se.String())
	}
	errs := se.String()
	if c := strings.Count(errs, "cannot record this run"); c != 1 || !strings.Contains(errs, "locked by another process") {
		t.Errorf("want one notice that the database is locked; stderr:\n%s", errs)
	}
	if !strings.Contains(errs, "recorded the run in "+e.home+" after all") {
		t.Errorf("the run was not recorded in the state directory once it could be:\n%s", errs)
	}
	d := e.explain("locked")
	if d["reason"] != "success" {
		t.Errorf("explain locked: reason %v, want success", d["reason"])
	}
	logs := e.run("logs", "locked")
	if !strings.Contains(logs.stdout, "job-done") {
		t.Errorf("logs locked: %q (exit %d, %s)", logs.stdout, logs.code, logs.stderr)
	}
}

// TestRunWithReadOnlyHome (issue #26): a read-only $VRAMGUARD_HOME does not
// keep the job from running (before: exit 3): its output reaches the
// terminal, vramguard says once that it cannot record the run there and
// where it records it instead, and the run can be explained from there.
func TestRunWithReadOnlyHome(t *testing.T) {
	t.Parallel()
	e := &env{t: t, home: mountTmpfs(t, "4m")}
	if r := e.run("run", "--", "true"); r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", e.home).CombinedOutput(); err != nil {
		t.Skipf("remount read-only: %v: %s", err, out)
	}
	r := e.run("run", "--name", "ro", "--", "sh", "-c", "echo job-ran; exit 4")
	if r.code != 4 || r.stdout != "job-ran\n" {
		t.Fatalf("exit %d stdout %q, want the job's 4 and its output\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if c := strings.Count(r.stderr, "cannot record this run in "+e.home); c != 1 || !strings.Contains(r.stderr, "not writable") {
		t.Fatalf("want one notice that the state directory is not writable; stderr:\n%s", r.stderr)
	}
	i := strings.Index(r.stderr, "VRAMGUARD_HOME=")
	dir := strings.Fields(r.stderr[i+len("VRAMGUARD_HOME="):])[0]
	t.Cleanup(func() { os.RemoveAll(dir) })
	alt := &env{t: t, home: dir}
	if d := alt.explain("ro"); d["exit_code"] != float64(4) {
		t.Errorf("explain from %s: %v", dir, d)
	}
	if logs := alt.run("logs", "ro"); logs.stdout != "job-ran\n" {
		t.Errorf("logs from %s: %q", dir, logs.stdout)
	}

	// --detach too: the background supervisor records the run elsewhere,
	// and says where to follow it
	r = e.run("run", "--detach", "--json", "--name", "bg", "--", "sh", "-c", "echo bg-ran")
	var d struct {
		ID, Dir string
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); r.code != 0 || err != nil || !strings.Contains(r.stderr, "cannot record this run in "+e.home) {
		t.Fatalf("run --detach: exit %d %v\nstdout %s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
	}
	bgHome := filepath.Dir(filepath.Dir(d.Dir))
	t.Cleanup(func() { os.RemoveAll(bgHome) })
	bg := &env{t: t, home: bgHome}
	if logs := bg.run("logs", "-f", d.ID); logs.stdout != "bg-ran\n" {
		t.Errorf("logs -f %s from %s: %q (exit %d, %s)", d.ID, bgHome, logs.stdout, logs.code, logs.stderr)
	}
}
