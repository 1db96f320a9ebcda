package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// writeSafetensors writes a one-tensor safetensors file, a checkpoint that
// passes the structural check, at path.
func writeSafetensors(t *testing.T, path string) {
	t.Helper()
	hdr := []byte(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(hdr)))
	b.Write(hdr)
	b.Write(make([]byte, 8))
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runIn runs vramguard with args in directory dir with the env's state
// directory plus extra environment.
func (e *env) runIn(dir string, extra []string, args ...string) result {
	e.t.Helper()
	cmd := testbin.Vramguard(e.t, append(e.environ(), extra...), args...)
	cmd.Dir = dir
	r := testbin.Run(e.t, cmd)
	return result{r.Stdout, r.Stderr, r.Code}
}

// TestResumeNotInShellScript: a checkpoint whose name is shell (or Python)
// syntax is never run as code: {resume} inside a `sh -c` script or a
// `python -c` program, also behind env or nice, is refused (exit 2,
// pointing at $VRAMGUARD_RESUME), and so is such a name anywhere else
// {resume} stands; the environment variable carries the path verbatim.
func TestResumeNotInShellScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ck := t.TempDir()
	evil := filepath.Join(ck, "ck;touch pwned;.pt")
	writeSafetensors(t, evil)
	work := t.TempDir()

	for _, argv := range [][]string{
		{"bash", "-c", "echo resuming from {resume}"},
		{"sh", "-ec", "echo {resume}"},
		{"/bin/dash", "-c", "{resume}"},
		{"env", "A=1", "nice", "-n", "1", "bash", "-c", "echo resuming from {resume}"},
	} {
		r := e.runIn(work, nil, append([]string{"run", "--resume-from", ck, "--"}, argv...)...)
		if _, err := os.Stat(filepath.Join(work, "pwned")); err == nil {
			t.Fatalf("%q: the checkpoint's name was run as shell code (exit %d)\n%s", argv, r.code, r.stderr)
		}
		if r.code != 2 || !strings.Contains(r.stderr, "VRAMGUARD_RESUME") {
			t.Errorf("%q: exit %d, want 2 and advice to use $VRAMGUARD_RESUME; stderr:\n%s", argv, r.code, r.stderr)
		}
	}

	// Nor is it substituted anywhere else: a name no plain path has is
	// refused wherever {resume} stands, while the environment variable
	// carries it verbatim.
	for _, argv := range [][]string{
		{"/bin/echo", "--resume={resume}"},
		{"/bin/echo", "{resume}"},
		{"bash", "-c", `printf '%s\n' "$1"`, "sh", "{resume}"},
	} {
		r := e.runIn(work, nil, append([]string{"run", "--resume-from", ck, "--"}, argv...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "VRAMGUARD_RESUME") {
			t.Errorf("%q: exit %d, want 2 and advice to use $VRAMGUARD_RESUME; stderr:\n%s", argv, r.code, r.stderr)
		}
	}
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"bash", "-c", `printf '%s\n' "$VRAMGUARD_RESUME"`}, evil + "\n"},
	} {
		r := e.runIn(work, nil, append([]string{"run", "--resume-from", ck, "--"}, c.argv...)...)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("%q: exit %d stdout %q, want 0 and %q\n%s", c.argv, r.code, r.stdout, c.want, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "pwned")); err == nil {
		t.Fatal("the checkpoint's name was run as shell code")
	}

	// The same for Python's -c: a name that is Python syntax.
	pyck := t.TempDir()
	pyevil := filepath.Join(pyck, "ck');open('pwned','w');('.pt")
	writeSafetensors(t, pyevil)
	for _, argv := range [][]string{
		{python, "-c", "print('{resume}')"},
		{"env", python, "-u", "-c", "print('{resume}')"},
	} {
		r := e.runIn(work, nil, append([]string{"run", "--resume-from", pyck, "--"}, argv...)...)
		if _, err := os.Stat(filepath.Join(work, "pwned")); err == nil {
			t.Fatalf("%q: the checkpoint's name was run as Python (exit %d)\n%s", argv, r.code, r.stderr)
		}
		if r.code != 2 || !strings.Contains(r.stderr, `os.environ["VRAMGUARD_RESUME"]`) {
			t.Errorf("%q: exit %d, want 2 and advice to use os.environ[\"VRAMGUARD_RESUME\"]; stderr:\n%s", argv, r.code, r.stderr)
		}
	}
	for _, argv := range [][]string{
		{python, "-c", "import os; print(os.environ['VRAMGUARD_RESUME'])"},
	} {
		r := e.runIn(work, nil, append([]string{"run", "--resume-from", pyck, "--"}, argv...)...)
		if r.code != 0 || r.stdout != pyevil+"\n" {
			t.Errorf("%q: exit %d stdout %q, want 0 and %q\n%s", argv, r.code, r.stdout, pyevil+"\n", r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "pwned")); err == nil {
		t.Fatal("the checkpoint's name was run as Python")
	}
}

// mountTmpfs mounts a tmpfs of size at a new directory and unmounts it when
// the test ends.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	testbin.NeedRoot(t, "mounting a tmpfs")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fastPrinter prints n lines of 100 bytes as fast as Python can, then more
// (after the file named by argv[2] appears, if given), then exits 3.
const fastPrinter = `
import os, sys, time
n = int(sys.argv[1])
w = sys.stdout.write
for i in range(n):
    w("%09d " % i + "x" * 89 + "\n")
sys.stdout.flush()
if len(sys.argv) > 2:
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
    for i in range(30):
        print("after %d" % i, flush=True)
        time.sleep(0.05)
sys.exit(3)
`

func checkPrinted(t *testing.T, out string, n int) {
	t.Helper()
	if len(out) < n*100 {
		t.Fatalf("the terminal got %d bytes of the job's output, want at least %d", len(out), n*100)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		line := fmt.Sprintf("%09d ", i) + strings.Repeat("x", 89) + "\n"
		if out[i*100:(i+1)*100] != line {
			t.Fatalf("line %d of the output on the terminal is %q", i, out[i*100:(i+1)*100])
		}
	}
}

// TestDiskFullKeepsJob: a state directory that fills up while the job prints
// fast neither kills the job nor loses its output on the terminal: vramguard
// says once that logging stopped and exits with the job's status.
func TestDiskFullKeepsJob(t *testing.T) {
	t.Parallel()
	e := &env{t: t, home: mountTmpfs(t, "2m")}
	const n = 200000 // 20 MB
	r := e.run("run", "--", python, "-c", fastPrinter, fmt.Sprint(n))
	if r.code != 3 {
		t.Fatalf("exit %d, want the job's 3\nstderr:\n%s", r.code, end(r.stderr))
	}
	checkPrinted(t, r.stdout, n)
	if len(r.stdout) != n*100 {
		t.Errorf("stdout has %d bytes, want %d", len(r.stdout), n*100)
	}
	if strings.Contains(r.stderr, "BrokenPipe") {
		t.Errorf("the job died of a broken pipe:\n%s", end(r.stderr))
	}
	if c := strings.Count(r.stderr, "logging stopped"); c != 1 {
		t.Errorf("%d notices of logging stopped, want 1; stderr:\n%s", c, end(r.stderr))
	}
}

// TestDiskFullLoggingResumes: when space returns, logging resumes, the log
// says how many bytes it misses, and the run's end is recorded.
func TestDiskFullLoggingResumes(t *testing.T) {
	t.Parallel()
	e := &env{t: t, home: mountTmpfs(t, "2m")}
	filler := filepath.Join(e.home, "filler")
	if err := os.WriteFile(filler, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	goFile := filepath.Join(t.TempDir(), "go")
	const n = 20000 // 2 MB
	cmd, so, se := e.start("run", "--name", "refill", "--", python, "-c", fastPrinter, fmt.Sprint(n), goFile)
	var stderr string
	waitFor(t, 60*time.Second, "the notice that logging stopped", func() bool {
		stderr = se.String()
		return strings.Contains(stderr, "logging stopped")
	})
	// Space returns once the job has printed its flood (whose tail the log
	// dropped), so that what is freed holds the job's last lines and the
	// run's end, not the rest of a flood still on its way.
	waitFor(t, 60*time.Second, "the job's first lines on the terminal", func() bool {
		return len(so.String()) >= n*100
	})
	os.Remove(filler)
	os.WriteFile(goFile, nil, 0o600)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("vramguard did not end; stderr:\n%s", end(se.String()))
	}
	if c := cmd.ProcessState.ExitCode(); c != 3 {
		t.Fatalf("exit %d, want the job's 3; stderr:\n%s", c, end(se.String()))
	}
	checkPrinted(t, so.String(), n)
	if !strings.Contains(so.String(), "after 29\n") {
		t.Errorf("the terminal misses the job's last lines")
	}
	if c := strings.Count(se.String(), "logging stopped"); c != 1 {
		t.Errorf("%d notices of logging stopped, want 1; stderr:\n%s", c, end(se.String()))
	}
	logs := e.run("logs", "--notes", "refill")
	if logs.code != 0 {
		t.Fatalf("logs: exit %d: %s", logs.code, logs.stderr)
	}
	if !strings.Contains(logs.stdout, "after 29\n") {
		t.Errorf("logging did not resume: the log misses the job's last lines:\n%s", end(logs.stdout))
	}
	if !strings.Contains(logs.stdout, "bytes of output were not logged") {
		t.Errorf("the log does not mark the gap:\n%s", end(logs.stdout))
	}
	var runs []map[string]any
	testbin.Run(t, testbin.Vramguard(t, e.environ(), "runs", "--json")).JSON(t, &runs)
	if len(runs) != 1 || runs[0]["status"] != "finished" || runs[0]["exit_code"] != float64(3) {
		t.Errorf("the run's end was not recorded: %v\nstderr:\n%s", runs, end(se.String()))
	}
}

// end is the end of s, for messages.
func end(s string) string { return tail(s, 3000) }

// TestProbeSocketDirPrivate: a socket directory another user made in
// $TMPDIR (mode 0777, ready to swap the socket for its own) is not used; the
// job's probe socket lies in a directory only vramguard's user can enter,
// under $XDG_RUNTIME_DIR when that is set.
func TestProbeSocketDirPrivate(t *testing.T) {
	t.Parallel()
	testbin.NeedRoot(t, "acting as another user")
	tmp := t.TempDir()
	os.Chmod(tmp, 0o1777)
	hostile := filepath.Join(tmp, fmt.Sprintf("vramguard-%d", os.Getuid()))
	if err := os.Mkdir(hostile, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(hostile, 0o777)
	if err := os.Chown(hostile, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// The job looks at its socket's directory while the run holds it (a
	// fresh private one is removed at the end).
	show := `import os, stat
p = os.environ.get("VRAMGUARD_PROBE_SOCKET", "")
st = os.lstat(os.path.dirname(p)) if p else None
print(p, st.st_uid if st else -1, oct(stat.S_IMODE(st.st_mode)) if st else "", stat.S_ISDIR(st.st_mode) if st else "")`
	sockDir := func(t *testing.T, extra ...string) string {
		t.Helper()
		e := newEnv(t)
		env := []string{"TMPDIR=" + tmp}
		r := e.runIn(t.TempDir(), append(env, extra...), "run", "--", python, "-c", show)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var sock, mode, isDir string
		var uid int
		if _, err := fmt.Sscan(r.stdout, &sock, &uid, &mode, &isDir); err != nil || sock == "" {
			t.Fatalf("the job got no probe socket: %q (%v)\n%s", r.stdout, err, r.stderr)
		}
		dir := filepath.Dir(sock)
		if dir == hostile || uid != os.Getuid() || mode != "0o700" || isDir != "True" {
			t.Errorf("probe socket %s is in a directory owned by uid %d with mode %s (a directory: %s)", sock, uid, mode, isDir)
		}
		return dir
	}
	t.Run("tmpdir", func(t *testing.T) { sockDir(t, "XDG_RUNTIME_DIR=") })
	t.Run("xdg_runtime_dir", func(t *testing.T) {
		xdg := t.TempDir()
		os.Chmod(xdg, 0o700) // as /run/user/UID is
		if dir := sockDir(t, "XDG_RUNTIME_DIR="+xdg); !strings.HasPrefix(dir, xdg+"/") {
			t.Errorf("probe socket directory %s is not under $XDG_RUNTIME_DIR %s", dir, xdg)
		}
	})
}

// TestServeHostHeader: on a loopback address the dashboard answers only
// requests for a loopback host (DNS rebinding), unless --allowed-host
// names another.
func TestServeHostHeader(t *testing.T) {
	t.Parallel()
	get := func(s *server, host string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+"/api/v1/runs", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	s := startServe(t, "", "--gpu-backend", "none", "--probe-socket", "none")
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	for host, want := range map[string]int{
		"evil.example":              421,
		"evil.example:" + port:      421,
		"localhost:" + port:         200,
		"localhost":                 200,
		"127.0.0.1:" + port:         200,
		"127.0.0.2:" + port:         200,
		"[::1]:" + port:             200,
		"localhost.evil.example":    421,
		"127.0.0.1.evil.example:80": 421,
	} {
		if got := get(s, host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	s2 := startServe(t, "", "--gpu-backend", "none", "--probe-socket", "none", "--allowed-host", "evil.example")
	for host, want := range map[string]int{"evil.example": 200, "evil.example:" + port: 200, "localhost": 200, "other.example": 421} {
		if got := get(s2, host); got != want {
			t.Errorf("--allowed-host evil.example, Host %s: %d, want %d", host, got, want)
		}
	}
}

// TestExplainSanitizesTerminal: explain prints the job's log lines with
// control sequences made visible, never raw; logs stays byte-exact.
func TestExplainSanitizesTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("run", "--", python, "-c", `raise RuntimeError("\x1b]0;owned\x07\x1b[2J\x9b31m red")`)
	if r.code != 1 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	x := e.run("explain", "last")
	if x.code != 0 {
		t.Fatalf("explain: exit %d: %s", x.code, x.stderr)
	}
	if !strings.Contains(x.stdout, "RuntimeError") {
		t.Fatalf("explain does not show the exception:\n%s", x.stdout)
	}
	for _, c := range []string{"\x1b", "\x07", "\u009b"} {
		if strings.Contains(x.stdout, c) {
			t.Errorf("explain printed raw %q:\n%q", c, x.stdout)
		}
	}
	l := e.run("logs", "--stream", "stderr", "last")
	if !strings.Contains(l.stdout, "\x1b]0;owned\x07\x1b[2J\u009b31m red") {
		t.Errorf("logs is no longer byte-exact: %q", l.stdout)
	}
}

// TestLogsAttemptOutOfRange: an attempt that does not exist is a usage
// error, not an empty success.
func TestLogsAttemptOutOfRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--", "true"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"--attempt", "-1"}, {"--attempt", "0"}, {"--attempt", "2"}, {"-f", "--attempt", "2"}, {"-f", "--attempt", "-1"},
	} {
		r := e.run(append(append([]string{"logs"}, args...), "last")...)
		if r.code != 2 || !strings.Contains(r.stderr, "attempt") {
			t.Errorf("logs %v: exit %d stderr %q, want 2 and a message", args, r.code, r.stderr)
		}
	}
}

// TestCorruptStore: a state database that is not one is bad input (exit 2),
// named, with how to move it aside.
func TestCorruptStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := filepath.Join(e.home, "vramguard.db")
	if err := os.WriteFile(db, bytes.Repeat([]byte("garbage!"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"runs"}, {"explain", "last"}, {"run", "--", "true"}} {
		r := e.run(args...)
		if r.code != 2 || !strings.Contains(r.stderr, db) || !strings.Contains(r.stderr, "mv "+db+" "+db+".corrupt") {
			t.Errorf("%v: exit %d, want 2 naming %s and how to move it aside; stderr %q", args, r.code, db, r.stderr)
		}
	}
}

// TestReadOnlyCommandsKeepHome: commands that only read never create the
// state directory.
func TestReadOnlyCommandsKeepHome(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "x", "y")
	e := &env{t: t, home: home}
	r := e.run("runs")
	if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "no runs yet") {
		t.Errorf("runs: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := e.run("runs", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("runs --json: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"logs", "last"}, {"explain"}, {"explain", "last"}} {
		if r := e.run(args...); r.code != 2 || !strings.Contains(r.stderr, "no runs yet") {
			t.Errorf("%v: exit %d stderr %q, want 2 and no runs yet", args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Dir(home)); err == nil {
		t.Errorf("a read-only command created %s", filepath.Dir(home))
	}
}

// TestSampleIntervalFloor: a sample interval below 50ms is refused.
func TestSampleIntervalFloor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, d := range []string{"1ns", "49ms", "0s", "-1s"} {
		r := e.run("run", "--sample-interval", d, "--", "true")
		if r.code != 2 || !strings.Contains(r.stderr, "at least 50ms") {
			t.Errorf("--sample-interval %s: exit %d stderr %q", d, r.code, r.stderr)
		}
	}
	if r := e.run("run", "--sample-interval", "50ms", "--", "true"); r.code != 0 {
		t.Errorf("--sample-interval 50ms: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestServeBlankToken: a blank token does not open a non-loopback address.
func TestServeBlankToken(t *testing.T) {
	t.Parallel()
	// serve that starts runs until it is killed: 10s is plenty for a refusal.
	serve := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--listen", "0.0.0.0:0", "--gpu-backend", "none", "--probe-socket", "none"}, args...)...)
		cmd.Env = append(os.Environ(), "VRAMGUARD_HOME="+t.TempDir())
		var se bytes.Buffer
		cmd.Stderr = &se
		cmd.Run()
		return cmd.ProcessState.ExitCode(), se.String()
	}
	for _, tok := range []string{" ", "", "\t \n"} {
		if code, stderr := serve("--token", tok); code != 2 {
			t.Errorf("--token %q: exit %d, want 2; stderr %q", tok, code, stderr)
		}
	}
	f := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(f, []byte(" \n"), 0o600)
	if code, stderr := serve("--token-file", f); code != 2 {
		t.Errorf("blank --token-file: exit %d, want 2; stderr %q", code, stderr)
	}
}
