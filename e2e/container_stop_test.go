package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestContainerStopGivesTheGrace: `vramguard run` as the first process of
// a container (PID 1 of a new PID namespace) is stopped as docker stop and
// the kubelet stop one: SIGTERM, then SIGKILL 10 s later. The job's
// SIGTERM handler, whose save takes 8 s, finishes in that grace, though
// the run's own --stop-timeout is 2 s (that is vramguard stop's, not a
// signal's); vramguard ends before the SIGKILL, with the job's status.
func TestContainerStopGivesTheGrace(t *testing.T) {
	t.Parallel()
	testbin.NeedRoot(t, "a new PID namespace (unshare --pid)")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal("needs Debian package util-linux (unshare): scripts/test.sh installs what the tests need")
	}
	e := newEnv(t)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "train.py"), []byte(graceTrain), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", bin, "run", "--stop-timeout", "2s", "--", python, "train.py", "8")
	cmd.Dir, cmd.Env = work, e.environ()
	out, log := startReady(t, cmd)
	var pid1 int
	waitFor(t, 10*time.Second, "the namespace's first process", func() bool {
		if c := testbin.Children(cmd.Process.Pid); len(c) == 1 {
			pid1 = c[0]
		}
		return pid1 > 0
	})
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid1) + "/status"); !strings.Contains(string(b), "NSpid:\t"+strconv.Itoa(pid1)+"\t1\n") {
		t.Fatalf("pid %d is not PID 1 of its namespace:\n%s", pid1, b)
	}

	// docker stop: SIGTERM, 10 s, SIGKILL
	term := time.Now()
	if err := syscall.Kill(pid1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for alive(pid1) && time.Since(term) < 10*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	killed := alive(pid1)
	if killed {
		syscall.Kill(pid1, syscall.SIGKILL)
	}
	cmd.Wait()
	if killed {
		t.Fatalf("vramguard still ran 10 s after SIGTERM; it was SIGKILLed\n%s\n%s", log(), out.String())
	}
	if !strings.Contains(log(), "saved") {
		t.Fatalf("the job's 8-s save did not finish in the 10-s grace:\n%s\n%s", log(), out.String())
	}
	if took := time.Since(term); took < 8*time.Second {
		t.Errorf("vramguard ended %.1fs after SIGTERM, before the job's 8-s save could", took.Seconds())
	}
	if code := cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("exit %d, want the job's 143\n%s", code, out.String())
	}
	pm := e.explain("last")
	if pm["exit_code"] != float64(143) || pm["attempts"] != float64(1) {
		t.Errorf("post-mortem: exit code %v, %v attempts; want 143, 1", pm["exit_code"], pm["attempts"])
	}
}
