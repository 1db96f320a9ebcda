// Signals and requests during an attempt: the supervisor's own signals forwarded to
// the job, the control socket's stop, kill and restart.

package supervise

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/timeline"
)

// signalled handles a signal the supervisor received (control.go): one that
// ends the job is forwarded once and never escalates, unless it is a
// person's second Ctrl-C; any other is delivered each time.
func (a *running) signalled(ctx context.Context, sig syscall.Signal, killAll func()) {
	o := a.s.o
	if !endsJob(sig) {
		a.signalJob(sig, sig == syscall.SIGUSR2)
		a.s.event(ctx, a.n, timeline.KindSignal, diagnose.SignalName(sig)+" delivered to the job", map[string]any{"signal": diagnose.SignalName(sig)})
		if sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 {
			a.s.notifyf("%s delivered to the job", diagnose.SignalName(sig))
		}
		return
	}
	if sig == syscall.SIGHUP && o.Detached {
		return
	}
	terminal := o.Terminal != nil && o.Terminal()
	if a.stopSignal != 0 || a.interrupted && !a.restarting {
		if sig == syscall.SIGINT && terminal {
			a.s.notifyf("killing the job (Ctrl-C again)")
			killAll()
			return
		}
		if !a.repeatNoted {
			a.repeatNoted = true
			a.s.notifyf("%s again: the job has it already; waiting for it to end (its sender decides when to kill it)", diagnose.SignalName(sig))
		}
		return
	}
	a.interrupted, a.s.interrupted = true, true
	a.stopSignal = sig
	a.noteStop(sig, terminal)
	fwd := sig
	if sig == syscall.SIGHUP {
		a.hangUp, a.s.hangUp = true, true
		// a job that handles SIGHUP gets it; one that does not would die
		// of it at once, with no chance to save, so it gets SIGTERM
		if !catches(o.Proc, a.jobPID, syscall.SIGHUP) {
			fwd = syscall.SIGTERM
		}
		a.s.notifyf("the terminal closed (SIGHUP): stopping the job; run it with --detach to keep it running without a terminal")
	}
	again := "vramguard waits for it to end"
	if terminal {
		again = "Ctrl-C again to kill it"
	}
	a.s.notifyf("stopping the job (%s forwarded; %s)", diagnose.SignalName(fwd), again)
	a.s.event(ctx, a.n, timeline.KindStop, "stopped by "+diagnose.SignalName(sig), map[string]any{"signal": diagnose.SignalName(sig), "forwarded": diagnose.SignalName(fwd)})
	a.signalJob(fwd, false)
}

// request handles a request of the control socket: stop (SIGTERM, SIGKILL
// after the stop timeout), kill (SIGKILL now), restart (a stop, then the
// next attempt at once).
func (a *running) request(ctx context.Context, op runctl.Op, stopTimer *<-chan time.Time, killAll func()) {
	o := a.s.o
	switch op {
	case runctl.OpKill:
		if !a.interrupted || a.restarting {
			a.interrupted, a.s.interrupted = true, true
			a.s.event(ctx, a.n, timeline.KindStop, "stopped by request (kill)", map[string]any{"request": string(op)})
		}
		a.s.notifyf("killing the job (stop --kill)")
		killAll()
	case runctl.OpStop:
		if a.interrupted && !a.restarting {
			a.s.notifyf("stop requested while the job is being stopped; still waiting for it to end")
			return
		}
		a.interrupted, a.s.interrupted = true, true
		a.s.notifyf("stopping the job (SIGTERM; it is killed in %s)", o.StopTimeout)
		a.s.event(ctx, a.n, timeline.KindStop, "stopped by request (vramguard stop)", map[string]any{"request": string(op)})
		a.signalJob(syscall.SIGTERM, false)
		*stopTimer = time.After(o.StopTimeout)
	case runctl.OpRestart:
		switch {
		case a.interrupted || a.s.interrupted:
			a.s.notifyf("restart requested while the job is being stopped; the stop stands")
			return
		case a.restarting:
			a.s.notifyf("killing the job")
			killAll()
			return
		}
		a.restarting = true
		a.s.notifyf("restart requested: ending attempt %d (SIGTERM; again to kill it, or it is killed in %s), then attempt %d starts", a.n, o.StopTimeout, a.n+1)
		a.s.event(ctx, a.n, timeline.KindRestartRequested, fmt.Sprintf("restart requested: attempt %d is ended (SIGTERM, SIGKILL after %s) and attempt %d starts", a.n, o.StopTimeout, a.n+1), nil)
		a.signalJob(syscall.SIGTERM, false)
		*stopTimer = time.After(o.StopTimeout)
	}
}

// signalJob sends sig to the job's process group (the job and the workers
// it forked), and with tree to every other process below the shim too (one
// that started a session of its own).
func (a *running) signalJob(sig syscall.Signal, tree bool) {
	_ = syscall.Kill(-a.jobPID, sig)
	if !tree {
		return
	}
	all, err := procfs.FS{}.All()
	if err != nil {
		return
	}
	for _, p := range procfs.Tree(all, a.shimPID)[1:] {
		if p.PGID != a.jobPID {
			_ = syscall.Kill(p.PID, sig)
		}
	}
}

// catches reports whether process pid has a handler of its own for sig
// (SigCgt in /proc/PID/status).
func catches(fs procfs.FS, pid int, sig syscall.Signal) bool {
	root := fs.Root
	if root == "" {
		root = "/"
	}
	b, err := os.ReadFile(filepath.Join(root, "proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// drainRequests drops restart requests that are waiting (the attempt about
// to start answers them) and keeps a stop or kill for it.
func (s *supervisor) drainRequests() {
	for {
		select {
		case op, ok := <-s.requests:
			if !ok {
				s.requests = nil
				return
			}
			if op != runctl.OpRestart {
				s.pending = op
			}
		default:
			return
		}
	}
}
