// Package e2e runs the built vramguard binary against real processes: each
// test starts real jobs that print real messages and die real deaths, and
// checks what vramguard recorded and printed.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/supervise"
	"github.com/vramguard/vramguard/internal/testbin"
)

var (
	bin    string // the vramguard binary under test
	python string // Debian's python3 with python3-torch
)

func TestMain(m *testing.M) {
	// the shim of the runs a test supervises in this process (fastRun)
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimCommand {
		os.Exit(supervise.RunShim(os.Args[2:]))
	}
	testbin.Require(testbin.Torch, testbin.NumPy, testbin.IPython, testbin.IPyKernel, testbin.JupyterServer,
		testbin.JupyterClient, testbin.NBClient)
	var err error
	if bin, err = testbin.Build(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	python = testbin.Python()
	testbin.Parallel(4)
	testbin.Main(m)
}

// env is one isolated state directory.
type env struct {
	t    *testing.T
	home string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, home: t.TempDir()}
}

// environ is this process's environment with the env's state directory.
func (e *env) environ() []string {
	return append(os.Environ(), "VRAMGUARD_HOME="+e.home)
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs vramguard with args and waits (bounded) for it.
func (e *env) run(args ...string) result {
	e.t.Helper()
	r := testbin.Run(e.t, testbin.Vramguard(e.t, e.environ(), args...))
	return result{r.Stdout, r.Stderr, r.Code}
}

// start starts vramguard in the background.
func (e *env) start(args ...string) (*exec.Cmd, *testbin.Buffer, *testbin.Buffer) {
	e.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = e.environ()
	var so, se testbin.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &so, &se
}

// explain returns `explain --json` of ref as a map.
func (e *env) explain(ref string) map[string]any {
	e.t.Helper()
	var m map[string]any
	testbin.Run(e.t, testbin.Vramguard(e.t, e.environ(), "explain", "--json", ref)).JSON(e.t, &m)
	return m
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testbin.WaitFor(t, d, what, cond)
}

func job(name string) string {
	p, _ := filepath.Abs(filepath.Join("testdata", "jobs", name))
	return p
}

// alive reports whether pid runs; a zombie is dead for our purposes.
func alive(pid int) bool { return testbin.Alive(pid) }

// outcome is what a finished command left: its output, its exit status
// (-1: it did not start) and the error its Run returned.
type outcome struct {
	stdout, stderr bytes.Buffer
	code           int
	err            error
}

// runAll runs cmds, at most n at once, each one's output into its
// outcome's buffers, and returns the outcomes (in cmds' order) once all
// have ended. A nil command is not run: its outcome stays empty.
func runAll(cmds []*exec.Cmd, n int) []outcome {
	outs := make([]outcome, len(cmds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, n)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		o := &outs[i]
		cmd.Stdout, cmd.Stderr = &o.stdout, &o.stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			o.err = cmd.Run()
			o.code = cmd.ProcessState.ExitCode()
		}()
	}
	wg.Wait()
	return outs
}

// startReady starts cmd, a training whose script notes what it does in
// signals.log in cmd.Dir, with its stdout and stderr into out; kills it
// when t ends; and waits up to 60 s for the script to note " ready ".
// log reads signals.log as it is now.
func startReady(t *testing.T, cmd *exec.Cmd) (out *testbin.Buffer, log func() string) {
	t.Helper()
	out = &testbin.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	log = func() string { b, _ := os.ReadFile(filepath.Join(cmd.Dir, "signals.log")); return string(b) }
	testbin.WaitFor(t, 60*time.Second, "the training to start", func() bool { return strings.Contains(log(), " ready ") }, func() { t.Log(out.String()) })
	return out, log
}

// eventKinds counts the events of a post-mortem (explain --json's
// "events") by kind; an event that is not an object counts under "".
func eventKinds(pm map[string]any) map[string]int {
	kinds := map[string]int{}
	evs, _ := pm["events"].([]any)
	for _, ev := range evs {
		m, _ := ev.(map[string]any)
		k, _ := m["kind"].(string)
		kinds[k]++
	}
	return kinds
}

func strs(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
	}
	return out
}
