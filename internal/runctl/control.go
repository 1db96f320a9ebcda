// Package runctl is how anything outside a supervisor knows and controls
// supervised runs: which process is which run's job (for attribution), and
// how to ask a run's supervisor, safely, to stop or restart it. It reads the
// run store and talks to supervisors' control sockets; it never starts or
// reaps a process.
package runctl

import (
	"errors"
	"fmt"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
)

// A running supervisor is controlled by requests on its control socket
// (Request, ListenControl), from `vramguard stop` and `vramguard restart` or
// from the agent's API: stop, kill, restart (Op). Only the run's owner or
// root may make them: the socket is the owner's alone (mode 0600 in a
// private directory) and the supervisor checks each caller's peer
// credentials. The agent runs as root on a node, so its endpoints demand its
// token first.
//
// Signals are the job's: a scheduler (Slurm's scancel, its time limit and
// --signal warnings), a container runtime (docker stop, the kubelet) or a
// terminal signals every process of a job, or its first one, and expects
// the job's own handlers to run. The supervisor delivers each signal a job
// may handle to the job and takes none of them for a request of its own.

// ErrNotRunning is matched (errors.Is) by Request's error when the
// run has ended or its supervisor is gone.
var ErrNotRunning = errors.New("the run is not running")

type notRunning string

func (e notRunning) Error() string        { return string(e) }
func (e notRunning) Is(target error) bool { return target == ErrNotRunning }

// checkRunning fails unless r is running and its supervisor is still the
// process that recorded it (PID and start time).
func checkRunning(fs procfs.FS, r *store.Run) error {
	if r.Status != store.StatusRunning {
		reason := r.Reason
		if reason == "" {
			reason = "-"
		}
		return notRunning(fmt.Sprintf("run %s is not running (%s, reason %s)", r.ID, r.Status, reason))
	}
	if !Alive(fs, r.SupervisorPID, r.SupervisorStart) {
		return notRunning(fmt.Sprintf("the supervisor of run %s (pid %d) is gone", r.ID, r.SupervisorPID))
	}
	return nil
}

// Alive reports whether pid runs and started at start ticks (0: any).
func Alive(fs procfs.FS, pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	p, err := fs.Proc(pid)
	if err != nil || p.State == "Z" {
		return false
	}
	return start == 0 || p.StartTicks == start
}
