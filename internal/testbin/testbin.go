// Package testbin is test support for the packages whose tests drive the
// built vramguard binary (e2e, internal/jupyter, internal/probe): it builds
// the binary once for all of them, runs commands with a bound and captures
// what they print and how they end, waits for conditions with a deadline,
// and names the Python interpreter that has torch. It also holds the
// fixtures the tests of several packages share, one helper a shape of
// setup: throwaway users and directories every user may enter (users.go),
// file trees, copies and hashes of them (tree.go), the corpora (corpus.go).
//
// Only _test.go files may import it. The vramguard binary must never: it
// would link the testing package into what users run.
package testbin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeout bounds every command made by Command: a hung command fails its
// own test instead of running into the whole test binary's -timeout.
const Timeout = 2 * time.Minute

// pkg is built with the import path, so the build works from any package
// directory of the module.
const pkg = "github.com/vramguard/vramguard/cmd/vramguard"

// Version is the version the binary under test is stamped with, as
// scripts/dist.sh stamps a release (-ldflags -X), so the one build serves
// the test of that stamp too.
const Version = "v0.0.0-test"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Build builds the vramguard binary and returns its path, once per test
// process; later calls return the first call's result. Every test package
// of a checkout shares the one binary, in the user's cache directory under
// a name from the module's directory: go build links it only when it is
// not the build of these sources already (its build ID says so), and a
// lock keeps two test processes from linking it at once. Linking it is
// 4 s of CPU, which each package that runs it paid before.
func Build() (string, error) {
	buildOnce.Do(func() {
		binPath, buildErr = build()
	})
	return binPath, buildErr
}

func build() (string, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("build vramguard: find the module: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256(bytes.TrimSpace(root))
	dir := filepath.Join(cache, "vramguard-test", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("build vramguard: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("build vramguard: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("build vramguard: lock %s: %w", lock.Name(), err)
	}
	bin := filepath.Join(dir, "vramguard")
	// -buildvcs=auto: the binary records the checkout's revision, as a
	// release build does, whatever GOFLAGS a machine sets
	out, err := exec.Command("go", "build", "-o", bin, "-buildvcs=auto",
		"-ldflags", "-X github.com/vramguard/vramguard/internal/cli.Version="+Version, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build vramguard: %v\n%s", err, out)
	}
	return bin, nil
}

// Path is Build for a test: it fails t if the binary cannot be built.
func Path(t testing.TB) string {
	t.Helper()
	p, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Main runs the tests of m and exits with their status: a whole TestMain
// for packages with nothing else to set up.
func Main(m *testing.M) {
	os.Exit(m.Run())
}

// Parallel sets how many of a package's parallel tests run at once to n,
// unless the command line set -parallel. For TestMain, before m.Run: the
// e2e tests mostly wait on real jobs (an interpreter starting, a job
// sleeping or being killed), so more of them than the machine's cores
// keep it busy; go test's default is GOMAXPROCS.
func Parallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// Python is the interpreter with PyTorch: Debian's /usr/bin/python3
// (python3-torch), not whatever python3 comes first on PATH, unless
// VRAMGUARD_TEST_PYTHON names another.
func Python() string {
	if p := os.Getenv("VRAMGUARD_TEST_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// Command returns name with args, killed if it still runs Timeout from now
// or when t ends. env is its whole environment (nil: this process's).
func Command(t testing.TB, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	return CommandFor(t, Timeout, env, name, args...)
}

// CommandFor is Command with a limit of its own, for a command that drives
// many steps (a client restarting a kernel fifty times). A command killed
// at its limit is waited for at most WaitDelay more: a descendant it left
// holding its stdout or stderr (a kernel it started) makes Run return
// rather than hang the test.
func CommandFor(t testing.TB, limit time.Duration, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.WaitDelay = WaitDelay
	return cmd
}

// WaitDelay is how long Run waits, once a command has exited or been
// killed, for the descendants still holding its output pipes.
const WaitDelay = 10 * time.Second

// Vramguard is Command for the binary under test.
func Vramguard(t testing.TB, env []string, args ...string) *exec.Cmd {
	t.Helper()
	return Command(t, env, Path(t), args...)
}

// Result is what a finished command printed and how it ended.
type Result struct {
	// Args is the command line, the program's name first.
	Args           []string
	Stdout, Stderr string
	// Code is the exit status; -1 when a signal ended the command.
	Code int
	PID  int
}

// Run runs cmd to its end, capturing its stdout and stderr (cmd's own
// Stdout and Stderr are replaced). A command that ran and failed is a
// Result with its Code; t fails only when cmd could not be run at all.
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := Result{Args: cmd.Args, Stdout: so.String(), Stderr: se.String()}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
		r.PID = cmd.ProcessState.Pid()
	}
	var ee *exec.ExitError
	if errors.Is(err, exec.ErrWaitDelay) {
		// it ended, but something it started still held its output
		t.Logf("run %s: a descendant still held its output %v after it ended", strings.Join(cmd.Args, " "), WaitDelay)
		err = nil
	}
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s: %v\nstderr:\n%s", strings.Join(cmd.Args, " "), err, r.Stderr)
	}
	return r
}

// JSON decodes the command's stdout, a --json report, into v. It fails t
// unless the command exited 0 and printed JSON there.
func (r Result) JSON(t testing.TB, v any) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("%s: exit %d, want 0 and a JSON report\nstderr:\n%s", r.command(), r.Code, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
		t.Fatalf("%s: stdout is not the JSON report: %v\n%s", r.command(), err, r.Stdout)
	}
}

// command is the command line for messages, the program by its base name
// (the binary's full path is a temporary directory's).
func (r Result) command() string {
	if len(r.Args) == 0 {
		return "command"
	}
	return strings.Join(append([]string{filepath.Base(r.Args[0])}, r.Args[1:]...), " ")
}

// pollEvery is how often WaitFor checks its condition.
const pollEvery = 20 * time.Millisecond

// WaitFor checks cond until it holds, and fails t when d has passed first,
// naming what it waited for. Each onTimeout runs before that failure, to log
// what was seen last.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool, onTimeout ...func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			for _, f := range onTimeout {
				f()
			}
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(pollEvery)
	}
}

// Alive reports whether process pid exists and is not a zombie: a zombie
// has ended, it only waits to be reaped.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// Buffer is a bytes.Buffer that a running command (or an output copier)
// writes while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Pipes are a started command's standard streams: pipes to its stdin and
// from its stdout, and what it writes to stderr.
type Pipes struct {
	Stdin  io.WriteCloser
	Stdout io.ReadCloser
	Stderr *Buffer
}

// StartPiped starts cmd with a pipe to its stdin (open until the caller
// closes it), a pipe from its stdout, and its stderr kept; the caller
// waits for it.
func StartPiped(t testing.TB, cmd *exec.Cmd) Pipes {
	t.Helper()
	p := Pipes{Stderr: &Buffer{}}
	var err error
	if p.Stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if p.Stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}
