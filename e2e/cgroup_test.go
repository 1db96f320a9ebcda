package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestMemoryLimitRefusedWithoutCgroup: an unprivileged user with no cgroup to
// create and no systemd user manager gets a clear refusal (exit 3), never an
// uncapped job.
func TestMemoryLimitRefusedWithoutCgroup(t *testing.T) {
	t.Parallel()
	testbin.NeedRoot(t, "this test drops to user nobody")
	dir := testbin.SharedDir(t, "vramguard-nobody-")
	os.Chmod(dir, 0o777) // nobody writes its home and marker here
	exe := testbin.CopyBinary(t, bin, dir)
	marker := filepath.Join(dir, "ran")
	cmd := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--reset-env",
		exe, "--home", filepath.Join(dir, "home"), "run", "--memory-limit", "100m", "--", "sh", "-c", "touch "+marker)
	out, err := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if code != 3 {
		t.Fatalf("exit %d (%v), want 3:\n%s", code, err, out)
	}
	if !strings.Contains(string(out), "no memory cgroup can be created") || strings.Contains(string(out), "goroutine") {
		t.Errorf("unclear refusal:\n%s", out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the job ran uncapped")
	}
}
