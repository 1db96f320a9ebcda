package procfs

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestEnviron(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	cmd.Env = []string{"RANK=2", "WORLD_SIZE=4"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// Start returns once the child is forked; until its exec of sleep has
	// set up the new stack, the environment reads empty
	var env []string
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if env, err = (FS{}).Environ(cmd.Process.Pid); err != nil || len(env) > 0 {
			break
		}
	}
	if err != nil || !slices.Equal(env, []string{"RANK=2", "WORLD_SIZE=4"}) {
		t.Errorf("%q %v", env, err)
	}
}

// A real zombie's wait status, until it is reaped.
func TestZombieStatus(t *testing.T) {
	cmd := exec.Command("sh", "-c", "kill -SEGV $$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if _, ok := (FS{}).ZombieStatus(os.Getpid()); ok {
		t.Error("a running process has no zombie status")
	}
	deadline := time.Now().Add(5 * time.Second)
	var st int
	var ok bool
	for time.Now().Before(deadline) {
		if st, ok = (FS{}).ZombieStatus(pid); ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ws := syscall.WaitStatus(st); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSEGV {
		t.Errorf("status %#x ok %v, want SIGSEGV", st, ok)
	}
	cmd.Wait()
	if _, ok := (FS{}).ZombieStatus(pid); ok {
		t.Error("a reaped process has no zombie status")
	}
}
