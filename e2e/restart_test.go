package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkpointer trains forever: a torch checkpoint every 0.2 s (written aside
// and renamed in, so none is ever half-written), resuming from
// $VRAMGUARD_RESUME; it starts a grandchild in its own session and writes
// "PID GRANDCHILD_PID" to PIDS/attempt-N.
const checkpointer = `
import os, subprocess, sys, time, torch
ck, pids, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
att = os.environ["VRAMGUARD_ATTEMPT"]
resume = os.environ.get("VRAMGUARD_RESUME", "")
step = 0
if resume:
    step = torch.load(resume)["step"]
    print(f"attempt {att} resumed from {resume} at step {step}", flush=True)
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
with open(os.path.join(pids, "attempt-" + att), "w") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
while True:
    step += 1
    t = os.path.join(tmp, f"ckpt-{step:04d}.pt")
    torch.save({"step": step, "w": torch.ones(4)}, t)
    os.replace(t, os.path.join(ck, f"ckpt-{step:04d}.pt"))
    print(f"attempt {att} step {step}", flush=True)
    time.sleep(0.2)
`

var reCkptStep = regexp.MustCompile(`ckpt-(\d{4})\.pt$`)

// newestStep is the step of the newest checkpoint in dir (0 if none).
func newestStep(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "ckpt-*.pt"))
	n := 0
	for _, f := range files {
		if m := reCkptStep.FindStringSubmatch(f); m != nil {
			s, _ := strconv.Atoi(m[1])
			n = max(n, s)
		}
	}
	return n
}

// attemptPIDs waits for PIDS/attempt-N and returns the PIDs in it.
func attemptPIDs(t *testing.T, dir string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, 30*time.Second, fmt.Sprintf("attempt %d to write its PIDs", n), func() bool {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("attempt-%d", n)))
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			p, _ := strconv.Atoi(f)
			pids = append(pids, p)
		}
		return len(pids) == 2
	})
	return pids
}

// TestRestartDetachedRun restarts a real background run with `vramguard
// restart`: the first attempt's processes (a grandchild in its own session
// too) are gone, a second attempt runs although --restart is never, it
// resumes from the newest checkpoint, and it goes on training.
func TestRestartDetachedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ck, pidDir, tmp := t.TempDir(), t.TempDir(), t.TempDir()
	script := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(script, []byte(checkpointer), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.run("run", "--detach", "--name", "rs", "--resume-from", ck, "--stop-timeout", "10s", "--",
		python, script, ck, pidDir, tmp)
	if r.code != 0 {
		t.Fatalf("run --detach: exit %d: %s", r.code, r.stderr)
	}
	t.Cleanup(func() { e.run("stop", "--kill", "rs") })
	first := attemptPIDs(t, pidDir, 1)
	waitFor(t, 30*time.Second, "attempt 1 to save three checkpoints", func() bool { return newestStep(ck) >= 3 })

	r = e.run("restart", "--json", "rs")
	if r.code != 0 {
		t.Fatalf("restart: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var doc struct {
		Ended       int    `json:"ended_attempt"`
		EndedReason string `json:"ended_reason"`
		Attempt     int    `json:"attempt"`
		PID         int    `json:"pid"`
		ResumeFrom  string `json:"resume_from"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("restart --json: %v\n%s", err, r.stdout)
	}
	if doc.Ended != 1 || doc.EndedReason != "restarted" || doc.Attempt != 2 || doc.PID <= 0 {
		t.Errorf("restart --json: %+v", doc)
	}
	m := reCkptStep.FindStringSubmatch(doc.ResumeFrom)
	if m == nil || filepath.Dir(doc.ResumeFrom) != ck {
		t.Fatalf("attempt 2 resumes from %q, want a checkpoint in %s", doc.ResumeFrom, ck)
	}
	resumed, _ := strconv.Atoi(m[1])
	if resumed < 3 {
		t.Errorf("attempt 2 resumes from step %d; attempt 1 had saved at least 3", resumed)
	}

	waitFor(t, 15*time.Second, "attempt 1's processes to be gone", func() bool { return !alive(first[0]) && !alive(first[1]) })
	second := attemptPIDs(t, pidDir, 2)
	waitFor(t, 30*time.Second, "attempt 2 to train on past its resume point", func() bool { return newestStep(ck) >= resumed+3 })
	for _, p := range second {
		if !alive(p) {
			t.Errorf("process %d of attempt 2 is not running", p)
		}
	}
	if logs := e.run("logs", "rs").stdout; !strings.Contains(logs, fmt.Sprintf("attempt 2 resumed from %s at step %d", doc.ResumeFrom, resumed)) {
		t.Errorf("attempt 2's log does not say it resumed from %s:\n%s", doc.ResumeFrom, logs)
	}

	var runs []map[string]any
	if err := json.Unmarshal([]byte(e.run("runs", "--json").stdout), &runs); err != nil || len(runs) != 1 {
		t.Fatalf("runs --json: %v %v", err, runs)
	}
	if runs[0]["status"] != "running" || runs[0]["attempts"] != float64(2) {
		t.Errorf("after the restart: status %v, attempts %v", runs[0]["status"], runs[0]["attempts"])
	}
	pm := e.explain("rs")
	detail := pm["attempts_detail"].([]any)
	if len(detail) != 2 || detail[0].(map[string]any)["reason"] != "restarted" ||
		!strings.Contains(fmt.Sprint(pm["restart_decision"]), "restarted by request") {
		t.Errorf("explain: attempts %v, restart decision %v", detail, pm["restart_decision"])
	}
	if kinds := eventKinds(pm); kinds["restart_requested"] != 1 || kinds["restart"] != 1 {
		t.Errorf("events by kind: %v", kinds)
	}

	if st := e.run("stop", "rs"); st.code != 0 {
		t.Fatalf("stop: exit %d: %s", st.code, st.stderr)
	}
	for _, p := range second {
		waitFor(t, 15*time.Second, fmt.Sprintf("process %d to be gone after stop", p), func() bool { return !alive(p) })
	}
	if r := e.run("restart", "rs"); r.code != 1 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("restart of a finished run: exit %d %q", r.code, r.stderr)
	}
	if r := e.run("restart", "no-such-run"); r.code != 2 {
		t.Errorf("restart of an unknown run: exit %d %q", r.code, r.stderr)
	}
}

// TestServeRestartNeedsToken: the agent's restart endpoint refuses a request
// without the token (the run keeps its attempt) and restarts the run with it.
func TestServeRestartNeedsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--detach", "--name", "svc", "--no-probe", "--", "sh", "-c", "sleep 300 & wait"); r.code != 0 {
		t.Fatalf("run --detach: exit %d: %s", r.code, r.stderr)
	}
	t.Cleanup(func() { e.run("stop", "--kill", "svc") })
	const token = "e2e-restart-token"
	s := startServe(t, e.home, "--gpu-backend", "none", "--probe-socket", "none", "--token", token)
	attempts := func() float64 {
		var v struct {
			Run struct{ Attempts float64 }
		}
		getJSON(t, s.URL+"/api/v1/runs/svc", &v)
		return v.Run.Attempts
	}
	post := func(tok string) int {
		req, _ := http.NewRequest("POST", s.URL+"/api/v1/runs/svc/restart", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tok := range []string{"", "wrong"} {
		if code := post(tok); code != 401 {
			t.Fatalf("restart with token %q: %d, want 401", tok, code)
		}
	}
	if n := attempts(); n != 1 {
		t.Fatalf("%v attempts after refused restarts, want 1", n)
	}
	if code := post(token); code != 202 {
		t.Fatalf("restart with the token: %d, want 202", code)
	}
	waitFor(t, 20*time.Second, "the run's second attempt", func() bool { return attempts() == 2 })
}
