package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/usage"
)

// TestSharedRunOwners: a run that holds no GPU memory (a job training on
// the CPU, or not yet on a GPU) is still its owner's. Under a root `serve
// --shared` with no GPU at all, root's own supervised run (in the agent's
// state directory) shows root as its owner: in ben's `top --once --json`
// (as "(another user's job)" with its owner, the one thing the shared view
// promises), in root's own, and in root's `report --by user` (its row, no
// "-" row).
func TestSharedRunOwners(t *testing.T) {
	t.Parallel()
	m := newSharedMachine(t, "vramguard-shared-owners-")
	b := m.newUser("vgoben")
	ben, benUID := b.name, b.uid
	c := exec.Command(m.vg, "run", "--name", "cpu-train", "--gpu-backend", "none", "--", "sleep", "600")
	c.Env = append(os.Environ(), "VRAMGUARD_HOME="+filepath.Join(m.dir, "agent-home"))
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Signal(syscall.SIGTERM); c.Wait() })
	waitFor(t, 20*time.Second, "root's job", func() bool {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(c.Process.Pid)).Output()
		return len(strings.TrimSpace(string(out))) > 0
	})
	m.serve(nil, "--gpu-backend", "none")
	type snap struct{ Jobs []attrib.Job }
	runOf := func(name string, uid int) (attrib.Job, bool) {
		out, _ := m.as(name, uid, "top", "--once", "--json")
		var s snap
		if json.Unmarshal([]byte(out), &s) != nil {
			return attrib.Job{}, false
		}
		for _, j := range s.Jobs {
			if j.Kind == attrib.KindRun || j.Name == "(another user's job)" {
				return j, true
			}
		}
		return attrib.Job{}, false
	}
	var j attrib.Job
	testbin.WaitFor(t, 30*time.Second, "root's run through the agent", func() bool {
		var ok bool
		j, ok = runOf(ben, benUID)
		return ok
	}, func() {
		out, _ := m.as(ben, benUID, "top", "--once", "--json")
		t.Logf("ben's top: %s\nserve: %s", out, m.serr.String())
	})
	if j.User != "root" || j.UID != 0 || j.Name != "(another user's job)" || j.GPUBytes != 0 {
		t.Errorf("root's CPU run as ben sees it: user %q uid %d name %q; want user root, uid 0, its name hidden", j.User, j.UID, j.Name)
	}
	if j, _ := runOf("root", 0); j.User != "root" || j.UID != 0 || j.Name != "cpu-train" {
		t.Errorf("root's CPU run as root sees it: user %q uid %d name %q", j.User, j.UID, j.Name)
	}
	// /metrics (root over the API socket): the run's series carry its user
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(m.shared, "api.sock"))
	}}}
	var metrics string
	testbin.WaitFor(t, 30*time.Second, "the run's series in /metrics", func() bool {
		resp, err := hc.Get("http://agent/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
		return strings.Contains(metrics, `job_name="cpu-train"`)
	}, func() { t.Logf("/metrics:\n%s", metrics) })
	for _, line := range strings.Split(metrics, "\n") {
		if strings.Contains(line, `job_name="cpu-train"`) && !strings.Contains(line, `user="root"`) {
			t.Errorf("a series of root's run without its user: %s", line)
		}
	}
	var rep usage.Report
	testbin.WaitFor(t, 30*time.Second, "root's row in its report", func() bool {
		out, _ := m.as("root", 0, "report", "--by", "user", "--json", "--since", "1h")
		rep = usage.Report{}
		if json.Unmarshal([]byte(out), &rep) != nil {
			return false
		}
		for _, r := range rep.Rows {
			if r.Group == "root" {
				return true
			}
		}
		return false
	}, func() { t.Logf("report: %+v", rep) })
	for _, r := range rep.Rows {
		if r.Group == "-" || r.Group == "" {
			t.Errorf("root's report by user has a row with no user: %+v", r)
		}
	}
}
