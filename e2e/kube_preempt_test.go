package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vramguard/vramguard/internal/kubepod/kubepodtest"
	"github.com/vramguard/vramguard/internal/testbin"
)

// podTrain trains (a step every half second) and, on SIGTERM, saves for a
// second and exits 143; signals.log gets "T ready PID", "T got SIGTERM",
// "T saved".
const podTrain = `import os, signal, sys, time
log = os.open("signals.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def note(what):
    os.write(log, ("%.3f %s\n" % (time.time(), what)).encode())
def on_term(sig, frame):
    note("got SIGTERM")
    time.sleep(1)
    note("saved")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
note("ready %d" % os.getpid())
while True:
    time.sleep(0.5)
`

// TestKubePreemptedPod: `vramguard run` in a pod (the in-cluster
// environment and a service account directory pointed at a TLS API server
// that checks the token) is sent SIGTERM as the kubelet sends it to a
// preempted pod. Once the job's SIGTERM handler has saved and exited, the
// supervisor reads the pod: its DisruptionTarget condition (the
// scheduler's own reason and message) makes the end `preempted`, with the
// condition and the deletion's grace as evidence, in the run's post-mortem
// and in explain.
func TestKubePreemptedPod(t *testing.T) {
	t.Parallel()
	pod, err := os.ReadFile(filepath.Join("..", "internal", "kubepod", "testdata", "preempted.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv := kubepodtest.Start(t, "ml", "train-7f9c4", pod, kubepodtest.OK)
	e := newEnv(t)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "train.py"), []byte(podTrain), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--", python, "train.py")
	cmd.Dir, cmd.Env = work, append(e.environ(), srv.Env...)
	out, log := startReady(t, cmd)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !strings.Contains(log(), "saved") {
		t.Fatalf("the job's handler did not save:\n%s\n%s", log(), out.String())
	}
	if srv.Requests.Load() != 1 {
		t.Errorf("the pod was read %d times, want once", srv.Requests.Load())
	}
	const cond = "pod ml/train-7f9c4 DisruptionTarget: PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority pod"
	if !strings.Contains(out.String(), "preempted") {
		t.Errorf("the run's post-mortem does not say preempted:\n%s", out.String())
	}
	pm := e.explain("last")
	ev := strings.Join(strs(pm["evidence"]), "\n")
	if pm["reason"] != "preempted" || !strings.Contains(ev, cond) || !strings.Contains(ev, "a grace of 30s (terminationGracePeriodSeconds)") {
		t.Errorf("explain: reason %v, evidence:\n%s\nwant preempted with %q and the grace", pm["reason"], ev, cond)
	}
	ex := testbin.Run(t, testbin.Vramguard(t, e.environ(), "explain", "last"))
	if !strings.Contains(ex.Stdout, "preempting to accommodate a higher priority pod") {
		t.Errorf("explain does not show the condition's message:\n%s", ex.Stdout)
	}
}
