package supervise

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/testbin"
)

// signalJob is a Python job that prints "got NAME" for every signal it
// handles and keeps running; on SIGTERM, SIGINT or SIGHUP (a stop) it
// takes SAVE seconds, as a checkpoint's save does, then prints "saved" and
// exits 0.
const signalJob = `
import signal, sys, time
SAVE = float(sys.argv[1])
def stop(sig, frame):
    print("got", signal.Signals(sig).name, flush=True)
    time.sleep(SAVE)
    print("saved", flush=True)
    sys.exit(0)
def note(sig, frame):
    print("got", signal.Signals(sig).name, flush=True)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, stop)
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH):
    signal.signal(s, note)
print("ready", flush=True)
while True:
    time.sleep(0.05)
`

// TestSignalsAreTheJobs: what becomes of each signal the supervisor
// receives. A stop is forwarded once and its repeats (Slurm signals a step
// twice, srun forwards again) neither reach the job again nor kill it, so
// its handler finishes its save and the job's own exit status is the
// run's; only a second Ctrl-C at a terminal kills. Every other signal a job
// may handle is delivered, and the job runs on, in its one attempt.
func TestSignalsAreTheJobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		terminal bool
		send     []syscall.Signal
		// got is the signals the job must have handled, in order
		got      []string
		saved    bool // the handler finished and the job exited 0
		exit     int
		stillRun bool // the job still runs after all was sent
	}{
		{"SIGTERM three times", false, []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGTERM}, []string{"SIGTERM"}, true, 0, false},
		{"SIGINT twice, no terminal", false, []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, []string{"SIGINT"}, true, 0, false},
		{"SIGTERM then SIGINT", false, []syscall.Signal{syscall.SIGTERM, syscall.SIGINT}, []string{"SIGTERM"}, true, 0, false},
		{"Ctrl-C twice at a terminal", true, []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, []string{"SIGINT"}, false, 137, false},
		{"warnings", false, []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGURG, syscall.SIGUSR1},
			[]string{"SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGURG", "SIGUSR1"}, false, 0, true},
		{"SIGHUP the job handles", false, []syscall.Signal{syscall.SIGHUP}, []string{"SIGHUP"}, true, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, []string{"python3", "-c", signalJob, "1.5"}, Options{Restart: RestartAlways, MaxRestarts: 3,
				StopTimeout: 100 * time.Millisecond, Terminal: func() bool { return tt.terminal }})
			// the whole line: unbuffered, print writes "ready" and its newline apart
			waitFor(t, 30*time.Second, "the job to be ready", func() bool { return strings.Contains(h.out.String(), "ready\n") })
			for i, s := range tt.send {
				h.sigs <- s
				// each signal is handled before the next comes, so the
				// order the job prints is the order sent
				want := strings.Join(tt.got[:min(i+1, len(tt.got))], "\n")
				testbin.WaitFor(t, 10*time.Second, "the job to handle "+s.String(), func() bool { return strings.Contains(gotLines(h.out.String()), want) },
					func() { t.Logf("output:\n%s\nnotices:\n%s", h.out.String(), h.notify.String()) })
				time.Sleep(100 * time.Millisecond)
			}
			if tt.stillRun {
				time.Sleep(500 * time.Millisecond)
				select {
				case <-h.done:
					t.Fatalf("the job ended after %v:\n%s\n%s", tt.send, h.out.String(), h.notify.String())
				default:
				}
				if got := gotLines(h.out.String()); got != strings.Join(tt.got, "\n") {
					t.Errorf("the job handled:\n%s\nwant:\n%s", got, strings.Join(tt.got, "\n"))
				}
				if n := strings.Count(h.out.String(), "ready"); n != 1 {
					t.Errorf("the job started %d times, want once (no restart)", n)
				}
				if len(h.events("stop")) != 0 || len(h.events("restart_requested")) != 0 {
					t.Errorf("a warning stopped or restarted the job: %+v %+v", h.events("stop"), h.events("restart_requested"))
				}
				if n := len(h.events("signal")); n != len(tt.send) {
					t.Errorf("%d signal events, want %d", n, len(tt.send))
				}
				h.sigs <- syscall.SIGTERM
				res := h.wait()
				if res.Postmortem.Attempts != 1 {
					t.Errorf("%d attempts, want 1", res.Postmortem.Attempts)
				}
				return
			}
			res := h.wait()
			out := h.out.String()
			if got := gotLines(out); got != strings.Join(tt.got, "\n") {
				t.Errorf("the job handled:\n%s\nwant:\n%s\nnotices:\n%s", got, strings.Join(tt.got, "\n"), h.notify.String())
			}
			if saved := strings.Contains(out, "saved"); saved != tt.saved {
				t.Errorf("the handler finished its save: %v, want %v\n%s", saved, tt.saved, h.notify.String())
			}
			if res.ExitStatus != tt.exit || res.Postmortem.Reason != diagnose.Interrupted || res.Postmortem.Attempts != 1 {
				t.Errorf("exit %d, reason %s, %d attempts; want %d, interrupted, 1 (not restarted)\n%s",
					res.ExitStatus, res.Postmortem.Reason, res.Postmortem.Attempts, tt.exit, h.notify.String())
			}
		})
	}
}

// gotLines is the "got NAME" lines of the job's output.
func gotLines(out string) string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "got ") {
			got = append(got, strings.TrimPrefix(l, "got "))
		}
	}
	return strings.Join(got, "\n")
}
