package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestSharedTopLive: a user's live `vramguard top` (the full-screen view,
// not --once) under a root `serve --shared` reads the agent's socket and,
// on the screen of a real terminal (tmux), shows their own job with its
// command and the other user's as owner and memory only, refreshing as the
// other job's memory grows.
func TestSharedTopLive(t *testing.T) {
	t.Parallel()
	testbin.Need(t, testbin.Tmux, testbin.Setpriv)
	m := newSharedMachine(t, "vramguard-shared-top-")
	ana, ben := m.newUser("vgtana"), m.newUser("vgtben")
	// ana's job is a sleep, ben's a tail: its command must not reach ana
	ana.pid, ben.pid = m.start(ana.uid, nil, "sleep", "600"), m.start(ben.uid, nil, "tail", "-f", "/dev/null")
	m.serveTwo("shared top", ana, ben, `
		{"pid": "$ANA", "device": 0, "memory": "6GiB", "sm_util": 70},
		{"pid": "$BEN", "device": 0, "memory": [["0s", "20GiB"], ["10m", "70GiB"]], "sm_util": 30}`)

	// ana's top in a tmux pane of its own server, as ana (m.command's
	// environment; TERM the pane's)
	home := filepath.Join(m.dir, "home-"+ana.name)
	os.MkdirAll(home, 0o700)
	os.Chown(home, ana.uid, ana.uid)
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cmdline := fmt.Sprintf("setpriv --reuid=%d --regid=%d --clear-groups env -i PATH=/usr/bin:/bin TERM=$TERM HOME=%s VRAMGUARD_SHARED_DIR=%s VRAMGUARD_HOME=%s %s top --interval 1s; sleep 30",
		ana.uid, ana.uid, home, m.shared, filepath.Join(home, "state"), m.vg)
	tmux("new-session", "-d", "-s", "top", "-x", "200", "-y", "40", cmdline)
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	row := func(screen, sub string) string {
		for _, l := range strings.Split(screen, "\n") {
			if strings.Contains(l, sub) {
				return l
			}
		}
		return ""
	}
	gib := regexp.MustCompile(`(\d+(\.\d+)?) GiB`)
	var screen string
	benGiB := func() string {
		if m := gib.FindStringSubmatch(row(screen, ben.name)); m != nil {
			return m[1]
		}
		return ""
	}
	waitFor(t, 30*time.Second, "both users' jobs on ana's live top", func() bool {
		screen = tmux("capture-pane", "-p", "-t", "top")
		return strings.Contains(row(screen, ana.name), "sleep") && benGiB() != ""
	})
	if strings.Contains(screen, "--once") || !strings.Contains(screen, "sort:") {
		t.Errorf("not top's live view:\n%s", screen)
	}
	if r := row(screen, ana.name); !strings.Contains(r, "6.0 GiB") {
		t.Errorf("ana's own job, with its command and 6 GiB:\n%s\nscreen:\n%s", r, screen)
	}
	if r := row(screen, ben.name); !strings.Contains(r, "(another user's job)") {
		t.Errorf("ben's job as ana sees it, owner and memory only:\n%s\nscreen:\n%s", r, screen)
	}
	if strings.Contains(screen, "tail") || strings.Contains(screen, "/dev/null") {
		t.Errorf("ana's screen shows ben's command:\n%s", screen)
	}
	// ben's memory grows by about 85 MiB a second: the view refreshes
	first := benGiB()
	waitFor(t, 30*time.Second, "ben's memory to move on ana's screen", func() bool {
		screen = tmux("capture-pane", "-p", "-t", "top")
		return benGiB() != "" && benGiB() != first
	})
	if g, _ := strconv.ParseFloat(benGiB(), 64); g < 20 || g > 70 {
		t.Errorf("ben's memory on ana's screen: %s GiB, want within the scenario's 20..70:\n%s", benGiB(), screen)
	}
	tmux("send-keys", "-t", "top", "q")
}
