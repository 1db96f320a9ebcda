package supervise

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHasChildren: the shim's check before reading every process reports
// a live child and a child not yet reaped, and nothing once it is reaped.
func TestHasChildren(t *testing.T) {
	if hasChildren() {
		t.Fatal("a child before any was started")
	}
	cmd := exec.Command("sleep", "0.2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !hasChildren() {
		t.Error("no child while sleep runs")
	}
	// exited but not reaped: still a child, and the check must not reap it
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if !hasChildren() {
		t.Error("no child while sleep is a zombie")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sleep: %v (the check reaped it?)", err)
	}
	if hasChildren() {
		t.Error("a child after the only one was reaped")
	}
}
