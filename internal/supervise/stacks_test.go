package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWaitStacksForEmptyFiles: the probe opens each process's stacks file
// when it starts, so the files are there, empty, before the signal; the
// supervisor waits for what the processes write, not for the files.
func TestWaitStacksForEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	fast, slow := filepath.Join(dir, "stacks-1-100.txt"), filepath.Join(dir, "stacks-1-200.txt")
	for _, f := range []string{fast, slow, filepath.Join(dir, "stacks-2-300.txt")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		err := os.WriteFile(fast, []byte("Thread 0x1 (most recent call first):\n  File \"a.py\", line 1 in fast\n"), 0o600)
		if err == nil {
			// a process scheduled late for its signal
			time.Sleep(600 * time.Millisecond)
			err = os.WriteFile(slow, []byte("Thread 0x2 (most recent call first):\n  File \"b.py\", line 2 in slow\n"), 0o600)
		}
		done <- err
	}()
	out, byPID := waitStacks(filepath.Join(dir, "stacks-1-*.txt"), 2, time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || byPID[100] != fast || byPID[200] != slow {
		t.Fatalf("stacks %q, files %v: want both processes' stacks", out, byPID)
	}
	if !strings.Contains(strings.Join(out, "\n"), "in slow") || !strings.HasPrefix(out[1], "Python stacks (stacks-1-200.txt):\n") {
		t.Errorf("the late process's stacks: %q", out)
	}
}

// TestWaitStacksBounded: a process that never writes its stacks costs the
// wait, and the stacks that came are kept.
func TestWaitStacksBounded(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "stacks-1-100.txt"), []byte("Thread 0x1:\n  File \"a.py\"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "stacks-1-200.txt"), nil, 0o600)
	out, byPID := waitStacks(filepath.Join(dir, "stacks-1-*.txt"), 2, 300*time.Millisecond)
	if len(out) != 1 || len(byPID) != 1 || byPID[100] == "" {
		t.Fatalf("stacks %q, files %v: want the one written", out, byPID)
	}
}
