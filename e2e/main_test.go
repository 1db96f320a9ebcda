// Package e2e runs the built vramguard binary against real processes: each
// test starts real jobs that print real messages and die real deaths, and
// checks what vramguard recorded and printed.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	bin    string // the vramguard binary under test
	python string // Debian's python3 with python3-torch
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vramguard-e2e-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "vramguard")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/vramguard").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build vramguard: %v\n%s", err, out)
		os.Exit(1)
	}
	python = "/usr/bin/python3"
	if p := os.Getenv("VRAMGUARD_TEST_PYTHON"); p != "" {
		python = p
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
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

type result struct {
	stdout, stderr string
	code           int
}

// run runs vramguard with args and waits (bounded) for it.
func (e *env) run(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "VRAMGUARD_HOME="+e.home)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("run %v: %v", args, err)
	}
	return result{so.String(), se.String(), code}
}

// start starts vramguard in the background.
func (e *env) start(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	e.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "VRAMGUARD_HOME="+e.home)
	var so, se bytes.Buffer
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
	r := e.run("explain", "--json", ref)
	if r.code != 0 {
		e.t.Fatalf("explain %s: exit %d: %s", ref, r.code, r.stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		e.t.Fatalf("explain --json is not JSON: %v\n%s", err, r.stdout)
	}
	return m
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func job(name string) string {
	p, _ := filepath.Abs(filepath.Join("testdata", "jobs", name))
	return p
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is dead for our purposes.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
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
