// Package runctl is how anything outside a supervisor knows and controls
// supervised runs: which process is which run's job (for attribution), and
// how to signal a run's supervisor safely. It reads the run store and sends
// signals; it never starts or reaps a process.
package runctl

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
)

// A running supervisor is controlled by signals, from `vramguard stop` and
// `vramguard restart` or from the agent's API:
//
//	SIGTERM (or SIGINT, SIGHUP)  stop the run: the job gets the signal, then
//	                             SIGKILL after --stop-timeout; no restart
//	RestartSignal                restart the running attempt now
//
// Signals need no listening socket and carry the kernel's own check: only
// the run's owner (the supervisor's user) or root may send them. The agent
// runs as root on a node, so its endpoints demand its token first.

// RestartSignal asks a supervisor to end the running attempt (SIGTERM to the
// job, SIGKILL after the stop timeout, as a stop does) and to start the next
// attempt at once, whatever the restart policy says and without counting
// against --max-restarts; with --resume-from it resumes from the newest
// checkpoint that passes the check. A second one while the attempt is
// ending kills it at once. A Go program ignores SIGUSR1 unless it asks for
// it, so a supervisor that predates restarts is not harmed by one.
const RestartSignal = syscall.SIGUSR1

// ErrNotRunning is matched (errors.Is) by SignalSupervisor's error when the
// run has ended or its supervisor is gone.
var ErrNotRunning = errors.New("the run is not running")

type notRunning string

func (e notRunning) Error() string        { return string(e) }
func (e notRunning) Is(target error) bool { return target == ErrNotRunning }

// SignalSupervisor sends sig to the supervisor of r after checking that r is
// running and that its supervisor is still the process that recorded it (PID
// and start time), so a reused PID is never signalled. The error matches
// ErrNotRunning when there is nothing to signal, and syscall.EPERM when the
// caller may not signal the run's owner.
func SignalSupervisor(fs procfs.FS, r *store.Run, sig syscall.Signal) error {
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
	if err := syscall.Kill(r.SupervisorPID, sig); err != nil {
		return fmt.Errorf("signal the supervisor of %s (pid %d): %w", r.ID, r.SupervisorPID, err)
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
