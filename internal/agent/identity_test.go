package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// fakeShimJob is an attacker's job that claims run id: a shell whose
// command line carries the shim's subcommand (`sh -c '...' __shim`) and,
// below it, the job with VRAMGUARD_RUN_ID=id in its environment, both the
// user's own. The scenario charges GPU memory to the job.
func fakeShimJob(id string) rigJob {
	return func(t *testing.T, uid int) (*exec.Cmd, int) {
		c := exec.Command("sh", "-c", "sleep 600; :", runctl.ShimCommand)
		c.Env = append(os.Environ(), "VRAMGUARD_RUN_ID="+id)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		testbin.WaitFor(t, 10*time.Second, "the fake shim's job", func() bool {
			out, _ := exec.Command("pgrep", "-P", strconv.Itoa(c.Process.Pid), "-x", "sleep").Output()
			pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
			return pid > 0
		})
		return c, pid
	}
}

// TestSharedRunClaims: a run's identity is not what a job claims. Alice
// (an unprivileged user) starts a job below a process whose command line
// says `__shim` with VRAMGUARD_RUN_ID set to root's running run. Her job
// does not become the run: over the agent's socket she cannot read root's
// run (post-mortem, snapshot, list), stop or restart it (all answered as
// for a run that does not exist), nor take its timeline; root's
// supervisor is left alone.
func TestSharedRunClaims(t *testing.T) {
	rootRun := "20261203-101010-a1b2c3"
	sr := newSharedRig(t, Config{}, fakeShimJob(rootRun), nil)
	ctx := context.Background()
	// root's run: its supervisor a root process, its job another
	sup := exec.Command("sleep", "600")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Process.Kill(); sup.Wait() })
	if err := sr.st.CreateRun(ctx, &store.Run{ID: rootRun, Name: "roots-secret-train", Status: store.StatusRunning,
		StartedAt: time.Now(), SupervisorPID: sup.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	sr.runs.set(runctl.NewStoreHints(sr.st, t.TempDir(), nil))
	sr.step(3)
	if err := sr.ag.Timelines().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range sr.ag.Snapshot().Jobs {
		if j.UID == sr.alice && (j.Key == "run:"+rootRun || j.RunID != "") {
			t.Errorf("alice's job claiming root's run is taken as it: key %q run %q", j.Key, j.RunID)
		}
	}
	code, body := sr.as(t, sr.alice, "GET /api/v1/machine")
	if code != 200 || strings.Contains(body, rootRun) {
		t.Errorf("alice's machine view: %d, shows root's run id: %s", code, body)
	}
	notFound := func(req string) {
		t.Helper()
		code, body := sr.as(t, sr.alice, req)
		if code != http.StatusNotFound || strings.Contains(body, "roots-secret") || strings.Contains(body, "ffffff") || strings.Contains(body, "a1b2c3") && !strings.Contains(req, "a1b2c3") {
			t.Errorf("alice: %s: %d %s, want 404 as for no run", req, code, body)
		}
	}
	// a second run with the same prefix: an ambiguous reference names none
	if err := sr.st.CreateRun(ctx, &store.Run{ID: rootRun[:16] + "ffffff", Name: "roots-secret-eval", Status: store.StatusFinished,
		StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"GET /api/v1/runs/" + rootRun, "GET /api/v1/runs/" + rootRun + "/snapshot", "GET /api/v1/runs/" + rootRun[:16],
		"POST /api/v1/runs/" + rootRun + "/stop", "POST /api/v1/runs/" + rootRun + "/restart"} {
		notFound(req)
	}
	code, body = sr.as(t, sr.alice, "GET /api/v1/runs")
	if code != 200 || strings.Contains(body, rootRun) {
		t.Errorf("alice's run list: %d %s", code, body)
	}
	code, body = sr.as(t, sr.alice, "GET /api/v1/timelines?range=1h&job=run:"+rootRun)
	var tls struct{ Timelines []Timeline }
	if err := json.Unmarshal([]byte(body), &tls); code != 200 || err != nil || len(tls.Timelines) != 0 {
		t.Errorf("alice takes root's run's timeline: %d %v %s", code, err, body)
	}
	time.Sleep(100 * time.Millisecond)
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(sup.Process.Pid) + "/stat"); err != nil || strings.Contains(string(st), ") Z ") {
		t.Errorf("root's supervisor was signalled through alice's claim")
	}
	// root (an admin) still sees and may read its run
	if code, body := sr.as(t, 0, "GET /api/v1/runs/"+rootRun); code != 200 {
		t.Errorf("root: its own run: %d %.200s", code, body)
	}
}
