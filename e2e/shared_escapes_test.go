package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSharedEscapes: a user names their job and their notebook with
// terminal escape sequences (retitle the window, clear the screen, a C1
// CSI, a newline that would start a row of its own); root's `top --once`
// and `kernels` through a root `serve --shared` show them as visible
// escapes, never as the bytes a terminal obeys.
func TestSharedEscapes(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-escapes-")
	u := m.newUser("vgesc")
	uid := u.uid
	const evil = "\x1b]0;pwned\x07\x1b[2J\u009b31m\nroot 1 fake"
	// a job whose command name is the sequence (argv[0])
	job := m.start(uid, []string{"EVIL=" + evil}, "bash", "-c", `exec -a "$EVIL" sleep 600`)
	// a kernel whose notebook (JPY_SESSION_NAME, as a server passes it) is
	kernel := m.kernel(uid, "ee11ee11-0000-4000-8000-0000000000ee", evil+".ipynb")
	m.serveSimulated("escapes", `
		{"pid": "$JOB", "device": 0, "memory": "6GiB", "sm_util": 70},
		{"pid": "$KERNEL", "device": 0, "memory": "2GiB", "sm_util": 0}`,
		[]string{fmt.Sprintf("JOB=%d", job), fmt.Sprintf("KERNEL=%d", kernel)})
	root := func(args ...string) string {
		out, _ := m.as("root", 0, args...)
		return out
	}
	waitFor(t, 30*time.Second, "the user's job and kernel through the agent", func() bool {
		out := root("top", "--once", "--json")
		return strings.Count(out, `"uid": `+strconv.Itoa(uid)) >= 2
	})
	for _, args := range [][]string{{"top", "--once"}, {"top", "--once", "--group"}, {"kernels"}} {
		out := root(args...)
		if strings.ContainsAny(out, "\x1b\x07\u009b") || strings.Contains(out, "\nroot 1 fake") {
			t.Errorf("root's %v passes the user's escape sequences to the terminal:\n%q", args, out)
		}
		if !strings.Contains(out, `\x1b]0;pwned\x07`) {
			t.Errorf("root's %v does not show the user's name as visible escapes:\n%s", args, out)
		}
	}
}
