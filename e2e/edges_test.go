package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHangUpSaysTerminalClosed (issue #26): a supervisor whose terminal
// closes (SIGHUP) stops the job and says that the terminal closed and that
// --detach keeps a run going without one, in its notice and its
// post-mortem, instead of "stopped by the user".
func TestHangUpSaysTerminalClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cmd, _, se := e.start("run", "--name", "hup", "--", "sh", "-c", "echo started; sleep 30")
	waitFor(t, 20*time.Second, "the job to start", func() bool {
		r := e.run("runs", "--json")
		return strings.Contains(r.stdout, `"running"`)
	})
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	code := exitCode(t, cmd, 20*time.Second)
	out := se.String()
	if !strings.Contains(out, "the terminal closed") || !strings.Contains(out, "--detach") {
		t.Errorf("exit %d; stderr does not say the terminal closed and suggest --detach:\n%s", code, out)
	}
	if strings.Contains(out, "stopped by the user") {
		t.Errorf("a closed terminal reads as a user's stop:\n%s", out)
	}
	d := e.explain("hup")
	if d["reason"] != "interrupted" || !strings.Contains(d["summary"].(string), "terminal closed") {
		t.Errorf("explain: reason %v summary %v, want interrupted and the terminal closed", d["reason"], d["summary"])
	}
}
