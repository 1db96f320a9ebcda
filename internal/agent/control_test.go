package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
)

// TestRunControlSignalsTheSupervisor: stop and restart through the API send
// their request to the run's recorded supervisor's control socket (this
// process stands in for the supervisor), and refuse runs that are not
// running or names that are no run.
func TestRunControlSignalsTheSupervisor(t *testing.T) {
	tests := []struct {
		action string
		op     runctl.Op
	}{
		{"stop", runctl.OpStop},
		{"restart", runctl.OpRestart},
	}
	for _, tc := range tests {
		t.Run(tc.action, func(t *testing.T) {
			r := newRig(t, twoJobs, Config{})
			r.step(1)
			ctx := context.Background()
			pid := os.Getpid()
			p, err := procfs.FS{}.Proc(pid)
			if err != nil {
				t.Fatal(err)
			}
			runDir := filepath.Join(t.TempDir(), "live")
			ctl, err := runctl.ListenControl(runDir, filepath.Join(t.TempDir(), "live.ctl"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ctl.Close() })
			for _, run := range []*store.Run{
				{ID: "live", Name: "bert", Status: store.StatusRunning, StartedAt: time.Now(), SupervisorPID: pid, SupervisorStart: p.StartTicks, Dir: runDir},
				{ID: "done", Status: store.StatusFinished, StartedAt: time.Now(), SupervisorPID: pid, SupervisorStart: p.StartTicks, Dir: runDir},
				{ID: "reused", Status: store.StatusRunning, StartedAt: time.Now(), SupervisorPID: pid, SupervisorStart: p.StartTicks + 1, Dir: runDir},
			} {
				if err := r.st.CreateRun(ctx, run); err != nil {
					t.Fatal(err)
				}
			}
			// Without the token nothing reaches the supervisor.
			for _, tok := range []string{"", "wrong"} {
				if code, body := r.do("POST", "/api/v1/runs/live/"+tc.action, tok, ""); code != 401 {
					t.Fatalf("%s with token %q: %d %s, want 401", tc.action, tok, code, body)
				}
			}
			select {
			case op := <-ctl.Requests():
				t.Fatalf("the supervisor got %q from a request without the token", op)
			default:
			}
			for _, c := range []struct {
				id   string
				want int
			}{{"nosuch", 404}, {"done", 409}, {"reused", 409}, {"live", 202}} {
				code, body := r.do("POST", "/api/v1/runs/"+c.id+"/"+tc.action, r.token, "")
				if code != c.want {
					t.Fatalf("%s %s: %d %s, want %d", tc.action, c.id, code, body, c.want)
				}
			}
			select {
			case op := <-ctl.Requests():
				if op != tc.op {
					t.Fatalf("the supervisor got %q, want %q", op, tc.op)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the supervisor got no %s request", tc.op)
			}
			select {
			case op := <-ctl.Requests():
				t.Fatalf("the supervisor got a second request %q: only \"live\" may reach it", op)
			default:
			}
			_, body := r.do("GET", "/api/v1/events?job=run:live", "", "")
			var evs struct{ Events []store.AgentEvent }
			if err := json.Unmarshal([]byte(body), &evs); err != nil {
				t.Fatal(err)
			}
			if len(evs.Events) != 1 || !strings.HasPrefix(evs.Events[0].Message, tc.action+" of run live") || evs.Events[0].JobName != "bert" {
				t.Errorf("events of run:live: %+v", evs.Events)
			}
		})
	}
}
