package supervise

import (
	"os"
	"syscall"
)

// Signals and requests. A supervisor's own controls (stop, kill, restart)
// come over its control socket (runctl.Request, Options.Requests). Every
// signal a job may handle is the job's: a scheduler, a container runtime
// or a terminal sends it meaning the job, often to every process of the
// job at once (Slurm signals the whole step, and again through srun), so
// the supervisor delivers it and takes none for a control of its own.
//
//   - SIGTERM, SIGINT, SIGHUP end the job: the first is forwarded to the
//     job's process group and the attempt counts as stopped; repeats are not
//     forwarded again and never escalate, so the job's own handler has the
//     whole grace its sender gives (Slurm's KillWait, a container's
//     stop timeout) and the sender's SIGKILL, not vramguard's, is the
//     deadline. Only a second SIGINT while vramguard runs in the foreground of
//     a terminal (a person's second Ctrl-C) kills the job at once.
//   - SIGUSR1, SIGUSR2, SIGURG, SIGWINCH are delivered to the job's process
//     group each time and change nothing else: a warning (Slurm's
//     --signal=USR1@90, Lightning's auto-requeue) keeps the job running.
//   - SIGTSTP stops the job with the supervisor and SIGCONT continues it.

// JobSignals are the signals a supervisor catches and delivers to its job
// (Options.Signals); SIGTSTP and SIGCONT it catches itself.
var JobSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGURG, syscall.SIGWINCH}

// endsJob reports whether sig asks the job to end.
func endsJob(sig os.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP
}
