package agent

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
)

// TestRunControlSignalsTheSupervisor: stop and restart through the API send
// their signal to the run's recorded supervisor (a stand-in here, which dies
// of it and so tells which signal came), and refuse runs that are not
// running or names that are no run.
func TestRunControlSignalsTheSupervisor(t *testing.T) {
	tests := []struct {
		action string
		sig    syscall.Signal
	}{
		{"stop", syscall.SIGTERM},
		{"restart", runctl.RestartSignal},
	}
	for _, tc := range tests {
		t.Run(tc.action, func(t *testing.T) {
			r := newRig(t, twoJobs, Config{})
			r.step(1)
			ctx := context.Background()
			sup := exec.Command("sleep", "60")
			if err := sup.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sup.Process.Kill(); sup.Wait() })
			p, err := procfs.FS{}.Proc(sup.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			for _, run := range []*store.Run{
				{ID: "live", Name: "bert", Status: store.StatusRunning, StartedAt: time.Now(), SupervisorPID: sup.Process.Pid, SupervisorStart: p.StartTicks},
				{ID: "done", Status: store.StatusFinished, StartedAt: time.Now(), SupervisorPID: sup.Process.Pid, SupervisorStart: p.StartTicks},
				{ID: "reused", Status: store.StatusRunning, StartedAt: time.Now(), SupervisorPID: sup.Process.Pid, SupervisorStart: p.StartTicks + 1},
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
			if !runctl.Alive(procfs.FS{}, sup.Process.Pid, p.StartTicks) {
				t.Fatal("the supervisor was signalled by a request without the token")
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
			err = sup.Wait()
			ws, ok := sup.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != tc.sig {
				t.Fatalf("the supervisor ended with %v, want death by %s", err, tc.sig)
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
