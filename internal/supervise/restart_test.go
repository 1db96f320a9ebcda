package supervise

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestMain lets the test binary be its own shim: Options.Self points at it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ShimCommand {
		os.Exit(RunShim(os.Args[2:]))
	}
	testbin.Require(testbin.Torch)
	os.Exit(m.Run())
}

// harness runs one supervised run in the background.
type harness struct {
	t       *testing.T
	st      *store.Store
	id      string
	out     *testbin.Buffer
	notify  *testbin.Buffer
	sigs    chan os.Signal
	done    chan struct{}
	res     *Result
	err     error
	options Options
}

// job is a shell job that prints "up ATTEMPT PID resume=PATH" and
// "child ATTEMPT PID" for a background sleep, then waits; with ignoreTERM
// both ignore SIGTERM. From attempt failFrom on (0: never) it exits 5 at once.
func job(ignoreTERM bool, failFrom int) []string {
	script := `echo "up $VRAMGUARD_ATTEMPT $$ resume=$VRAMGUARD_RESUME"`
	if failFrom > 0 {
		script += fmt.Sprintf(`; [ "$VRAMGUARD_ATTEMPT" -ge %d ] && exit 5`, failFrom)
	}
	script += `; sleep 300 & echo "child $VRAMGUARD_ATTEMPT $!"; wait`
	if ignoreTERM {
		script = `trap "" TERM; ` + script + `; wait`
	}
	return []string{"sh", "-c", script}
}

// start begins supervising command with o's policy fields.
func start(t *testing.T, command []string, o Options) *harness {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	st, err := store.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{t: t, st: st, id: "r1", out: &testbin.Buffer{}, notify: &testbin.Buffer{}, sigs: make(chan os.Signal, 4), done: make(chan struct{})}
	ctx := context.Background()
	if err := st.CreateRun(ctx, &store.Run{ID: h.id, Command: command, Status: store.StatusRunning, StartedAt: time.Now(),
		SupervisorPID: os.Getpid(), Dir: RunDir(home, h.id)}); err != nil {
		t.Fatal(err)
	}
	o.RunID, o.Command, o.Env, o.RunDir = h.id, command, os.Environ(), RunDir(home, h.id)
	o.Store, o.Proc, o.Self = st, procfs.FS{}, self
	o.Stdout, o.Stderr, o.Notify, o.Signals = h.out, h.out, h.notify, h.sigs
	if o.Terminal == nil {
		// a person at a terminal: a second Ctrl-C kills (stop)
		o.Terminal = func() bool { return true }
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = 50 * time.Millisecond
	}
	h.options = o
	go func() {
		defer close(h.done)
		h.res, h.err = Run(ctx, o)
	}()
	t.Cleanup(func() {
		select {
		case <-h.done:
		default:
			h.sigs <- syscall.SIGINT
			h.sigs <- syscall.SIGINT
			<-h.done
		}
	})
	return h
}

var reUp = regexp.MustCompile(`(?m)^up (\d+) (\d+) resume=(.*)$`)
var reChild = regexp.MustCompile(`(?m)^child (\d+) (\d+)$`)

// attempt waits for attempt n to be up and returns its shell's and its
// sleep's PIDs and its resume path.
func (h *harness) attempt(n int) (pids []int, resume string) {
	h.t.Helper()
	waitFor(h.t, 15*time.Second, fmt.Sprintf("attempt %d to start", n), func() bool {
		pids, resume = nil, ""
		out := h.out.String()
		for _, m := range reUp.FindAllStringSubmatch(out, -1) {
			if m[1] == strconv.Itoa(n) {
				p, _ := strconv.Atoi(m[2])
				pids, resume = append(pids, p), m[3]
			}
		}
		for _, m := range reChild.FindAllStringSubmatch(out, -1) {
			if m[1] == strconv.Itoa(n) {
				p, _ := strconv.Atoi(m[2])
				pids = append(pids, p)
			}
		}
		return len(pids) == 2
	})
	return pids, resume
}

// wait waits for Run to return.
func (h *harness) wait() *Result {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		h.t.Fatalf("the run did not end\noutput:\n%s\nnotices:\n%s", h.out.String(), h.notify.String())
	}
	if h.err != nil {
		h.t.Fatal(h.err)
	}
	return h.res
}

// stop stops the run as Ctrl-C twice at its terminal would, and waits for
// it.
func (h *harness) stop() *Result {
	h.sigs <- syscall.SIGINT
	h.sigs <- syscall.SIGINT
	return h.wait()
}

func (h *harness) attempts() []*store.Attempt {
	h.t.Helper()
	atts, err := h.st.Attempts(context.Background(), h.id)
	if err != nil {
		h.t.Fatal(err)
	}
	return atts
}

func (h *harness) events(kind string) []*store.Event {
	h.t.Helper()
	evs, err := h.st.Events(context.Background(), h.id)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*store.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func gone(pid int) bool { return !runctl.Alive(procfs.FS{}, pid, 0) }

// TestRestartRequest restarts a run by a request on its control socket, as
// `vramguard restart` makes it (runctl.Request, to this process, which
// stands in for the supervisor it records): the attempt's whole process
// tree ends, the next attempt starts at once although the policy is never,
// and it resumes from the checkpoint that appeared meanwhile.
func TestRestartRequest(t *testing.T) {
	ck := t.TempDir()
	runDir := filepath.Join(t.TempDir(), "r1")
	ctl, err := runctl.ListenControl(runDir, filepath.Join(t.TempDir(), "r1.ctl"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	h := start(t, job(false, 0), Options{Restart: RestartNever, ResumeFrom: ck, StopTimeout: 10 * time.Second, Requests: ctl.Requests()})
	first, resume := h.attempt(1)
	if resume != "" {
		t.Fatalf("attempt 1 resumed from %q in an empty directory", resume)
	}
	valid := filepath.Join(ck, "ckpt-0001.pt")
	b, err := os.ReadFile("../ckpt/testdata/torch/dtypes.pt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(valid, b, 0o644); err != nil {
		t.Fatal(err)
	}
	me, err := procfs.FS{}.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	run := &store.Run{ID: h.id, Status: store.StatusRunning, SupervisorPID: os.Getpid(), SupervisorStart: me.StartTicks, Dir: runDir}
	if err := runctl.Request(procfs.FS{}, run, runctl.OpRestart); err != nil {
		t.Fatal(err)
	}
	second, resume := h.attempt(2)
	for _, p := range first {
		if !gone(p) {
			t.Errorf("process %d of attempt 1 still runs after attempt 2 started", p)
		}
	}
	for _, p := range second {
		if gone(p) {
			t.Errorf("process %d of attempt 2 is not running", p)
		}
	}
	if resume != valid {
		t.Errorf("attempt 2 resumed from %q, want %q", resume, valid)
	}
	res := h.stop()
	if res.Postmortem.Attempts != 2 || res.Postmortem.Reason != diagnose.Interrupted {
		t.Errorf("run: %d attempts, reason %s; want 2, interrupted", res.Postmortem.Attempts, res.Postmortem.Reason)
	}
	atts := h.attempts()
	if len(atts) != 2 {
		t.Fatalf("%d attempts stored, want 2", len(atts))
	}
	var pm Postmortem
	if err := json.Unmarshal(atts[0].Verdict, &pm); err != nil {
		t.Fatal(err)
	}
	if atts[0].Reason != diagnose.Restarted || !strings.Contains(pm.Summary, "restarted by request") ||
		!strings.Contains(pm.RestartDecision, "restarted by request") {
		t.Errorf("attempt 1: reason %q, summary %q, restart decision %q", atts[0].Reason, pm.Summary, pm.RestartDecision)
	}
	if atts[1].ResumeFrom != valid {
		t.Errorf("attempt 2 stored resume_from %q", atts[1].ResumeFrom)
	}
	if evs := h.events("restart_requested"); len(evs) != 1 || evs[0].Attempt != 1 {
		t.Errorf("restart_requested events: %+v", evs)
	}
	rs := h.events("restart")
	if len(rs) != 1 || !strings.Contains(string(rs[0].Data), `"by_request":true`) {
		t.Errorf("restart events: %+v", rs)
	}
	if n := strings.Count(h.notify.String(), "restart requested"); n != 1 {
		t.Errorf("%d notices of the request:\n%s", n, h.notify.String())
	}
}

// TestRestartOfStubbornJob: a job that ignores SIGTERM is killed after the
// stop timeout or at a second request; a stop during the restart wins.
func TestRestartOfStubbornJob(t *testing.T) {
	tests := []struct {
		name        string
		stopTimeout time.Duration
		requests    int  // restart requests sent
		stop        bool // then a stop (twice, the second kills)
		attempts    int  // attempts when the run ends
	}{
		{"killed after the stop timeout", 200 * time.Millisecond, 1, false, 2},
		{"a second request kills at once", time.Hour, 2, false, 2},
		{"a stop during the restart wins", time.Hour, 1, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			restarts := make(chan runctl.Op, 4)
			h := start(t, job(true, 0), Options{Restart: RestartNever, StopTimeout: tt.stopTimeout, Requests: restarts})
			first, _ := h.attempt(1)
			for range tt.requests {
				restarts <- runctl.OpRestart
			}
			var res *Result
			if tt.stop {
				waitFor(t, 10*time.Second, "the restart request to be seen", func() bool { return len(h.events("restart_requested")) == 1 })
				res = h.stop()
			} else {
				h.attempt(2)
				res = h.stop()
			}
			for _, p := range first {
				if !gone(p) {
					t.Errorf("process %d of attempt 1 still runs", p)
				}
			}
			if res.Postmortem.Attempts != tt.attempts {
				t.Errorf("%d attempts, want %d\n%s", res.Postmortem.Attempts, tt.attempts, h.notify.String())
			}
			if tt.stop && strings.Contains(res.Postmortem.RestartDecision, "by request") {
				t.Errorf("a stopped run's decision says %q", res.Postmortem.RestartDecision)
			}
		})
	}
}

// TestRestartRequestsDoNotCount: two requested restarts, then failures under
// on-failure with --max-restarts 1: the policy still has its one restart.
func TestRestartRequestsDoNotCount(t *testing.T) {
	restarts := make(chan runctl.Op, 1)
	h := start(t, job(false, 3), Options{Restart: RestartOnFailure, MaxRestarts: 1, BackoffInitial: time.Millisecond,
		BackoffMax: time.Millisecond, Requests: restarts, StopTimeout: 10 * time.Second})
	h.attempt(1)
	restarts <- runctl.OpRestart
	h.attempt(2)
	restarts <- runctl.OpRestart
	res := h.wait() // attempts 3 and 4 exit 5 at once
	if res.Postmortem.Attempts != 4 || res.ExitStatus != 5 {
		t.Errorf("%d attempts, exit %d; want 4 attempts (2 requested, 1 by the policy), exit 5\n%s",
			res.Postmortem.Attempts, res.ExitStatus, h.notify.String())
	}
	if !strings.Contains(res.Postmortem.RestartDecision, "--max-restarts 1 reached") {
		t.Errorf("restart decision %q", res.Postmortem.RestartDecision)
	}
}

// TestRestartCutsBackoff: a request while the policy waits to restart starts
// the next attempt at once.
func TestRestartCutsBackoff(t *testing.T) {
	restarts := make(chan runctl.Op, 1)
	h := start(t, []string{"sh", "-c", `echo "ended $VRAMGUARD_ATTEMPT"; exit 3`}, Options{Restart: RestartAlways, MaxRestarts: 1,
		BackoffInitial: time.Hour, BackoffMax: time.Hour, Requests: restarts})
	waitFor(t, 10*time.Second, "the policy's restart to be announced", func() bool { return len(h.events("restart")) == 1 })
	restarts <- runctl.OpRestart
	res := h.wait()
	if res.Postmortem.Attempts != 2 || !strings.Contains(h.out.String(), "ended 2") {
		t.Errorf("%d attempts; output %q", res.Postmortem.Attempts, h.out.String())
	}
}
