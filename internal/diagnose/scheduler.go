package diagnose

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// Reasons of a job its scheduler ended (docs/FAILURES.md, "When the
// scheduler ends a job").
const (
	TimeLimit   = "time_limit"   // the scheduler's time limit (Slurm's "DUE TO TIME LIMIT")
	Preempted   = "preempted"    // preemption or eviction (Slurm's "DUE TO PREEMPTION", a pod's)
	Cancelled   = "cancelled"    // scancel, an admin, a requeue, a pod deleted
	NodeFailure = "node_failure" // the node failed ("DUE TO NODE FAILURE", the node lost)
)

// SchedulerReasons are the reasons of a job its scheduler ended.
var SchedulerReasons = []string{TimeLimit, Preempted, Cancelled, NodeFailure}

// EndedFromOutside reports whether reason means that something other than
// the job ended it on purpose (a person, vramguard's own restart, the
// scheduler): no process of the job failed first.
func EndedFromOutside(reason string) bool {
	switch reason {
	case Interrupted, Restarted, TimeLimit, Preempted, Cancelled, NodeFailure:
		return true
	}
	return false
}

// Stop is how the supervisor was asked to end the job: the signal it
// received, who sent it, and what the scheduler says of it. The supervisor
// fills it when a signal (not its own timers) ends the job.
type Stop struct {
	// Signal is the signal the supervisor received (SIGTERM, SIGINT,
	// SIGHUP, ...).
	Signal syscall.Signal
	// SenderPID and SenderUID are the siginfo's si_pid and si_uid (0 for
	// the kernel, or a sender in another PID namespace); Sender is the
	// sender's command name read when the signal came (/proc/PID/comm:
	// "slurmstepd", "kubelet", "containerd-shim", "bash"), "" if unknown.
	SenderPID, SenderUID int
	Sender               string
	// FromTerminal is set when the terminal sent it (Ctrl-C or Ctrl-\ at
	// the supervisor's controlling terminal: si_code SI_KERNEL, or the
	// terminal's foreground process group): a person's own interrupt.
	FromTerminal bool
	// At is when the signal came; Deadline the scheduler's end time for
	// the job (Slurm's SLURM_JOB_END_TIME), zero when unknown.
	At, Deadline time.Time
	// Scheduler holds what the scheduler says of the end, read outside the
	// job's output: the line Slurm wrote to the job's output file ("***
	// JOB 1234 ON n1 CANCELLED AT … DUE TO TIME LIMIT ***"), the reason of
	// a pod's DisruptionTarget condition ("PreemptionByScheduler",
	// "EvictionByEvictionAPI", "TerminationByKubelet",
	// "DeletionByTaintManager"), an event's message ("Preempted by pod …").
	Scheduler []string
	// Notes is what else was read of the end, evidence that names no
	// reason: the grace a pod's deletion gave it, that the pod had no
	// DisruptionTarget condition, or why the pod could not be read (the
	// permission to grant).
	Notes []string
}

var (
	// slurmstepd: "*** JOB 1234 ON n1 CANCELLED AT 2026-12-03T10:11:12 DUE TO TIME LIMIT ***",
	// "*** STEP 1234.0 ON n1 CANCELLED AT … ***" (scancel, no DUE TO), "… DUE TO NODE
	// FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"; srun's and older slurmstepd's forms
	// without " ON node"
	reSlurmCancel = lazyre.New(`\*\*\* (JOB|STEP) ([0-9][0-9._+a-z]*)(?: ON (\S+))? CANCELLED AT (\S+)(?: DUE TO ([A-Z ]+?)(?:,[^*]*)?)? \*\*\*`)
	// Kubernetes: a pod's DisruptionTarget reasons, and the events that
	// name a preemption or an eviction
	reKubePreempt = lazyre.New(`PreemptionBy(?:Kube)?Scheduler|Preempted by (?:a )?pod|EvictionByEvictionAPI|TerminationByKubelet|The node was low on resource|Pod was terminated in response to imminent node shutdown|Evicted`)
	reKubeNode    = lazyre.New(`DeletionByTaintManager|DeletionByPodGC|NodeNotReady|node\.kubernetes\.io/(?:unreachable|not-ready)`)
)

// schedulerEnd reads how the scheduler ended the job: from Slurm's line in
// the job's output or in stop.Scheduler, a pod's reason, or the signal's
// sender. ok is false when nothing says the scheduler ended it (and for a
// person's own interrupt at the terminal, which stays interrupted).
func schedulerEnd(r Reading, in Input) (reason, summary string, evidence []string, ok bool) {
	st := in.Stop
	if st != nil && st.FromTerminal {
		return "", "", nil, false
	}
	var lines []string
	if st != nil {
		lines = append(lines, st.Scheduler...)
	}
	for _, l := range r.Lines {
		lines = append(lines, l.Text)
	}
	// Slurm's own line: the newest wins (a requeued job's output holds the
	// earlier attempt's too)
	for i := len(lines) - 1; i >= 0; i-- {
		m := reSlurmCancel.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		what := strings.ToLower(m[1])
		if m[3] != "" {
			what += " " + m[2] + " on " + m[3]
		} else {
			what += " " + m[2]
		}
		ev := []string{strings.TrimSpace(lines[i])}
		switch due := strings.TrimSpace(m[5]); {
		case due == "TIME LIMIT":
			return TimeLimit, "Slurm ended the job at its time limit", append(ev, "read: Slurm cancelled "+what+" at "+m[4]+" because its time limit was reached"), true
		case due == "PREEMPTION":
			return Preempted, "Slurm preempted the job for another", append(ev, "read: Slurm cancelled "+what+" at "+m[4]+" to preempt it"), true
		case strings.HasPrefix(due, "NODE FAILURE"):
			return NodeFailure, "Slurm ended the job because its node failed", append(ev, "read: Slurm cancelled "+what+" at "+m[4]+" after a node of the job failed (slurmctld's log says which and why)"), true
		case due == "JOB REQUEUE":
			return Cancelled, "Slurm requeued the job (scontrol requeue): it ends here and runs again", append(ev, "read: "+what+" was requeued at "+m[4]), true
		case due == "":
			return Cancelled, "the job was cancelled (scancel by its user or an administrator)", append(ev, "read: Slurm cancelled "+what+" at "+m[4]+" on request (no DUE TO: scancel, not a limit)"), true
		default:
			return Cancelled, "Slurm cancelled the job (" + strings.ToLower(due) + ")", append(ev, "read: Slurm cancelled "+what+" at "+m[4]+" due to "+strings.ToLower(due)), true
		}
	}
	if st == nil {
		return "", "", nil, false
	}
	for _, l := range st.Scheduler {
		switch {
		case reKubePreempt.MatchString(l):
			return Preempted, kubeSummary(l), []string{strings.TrimSpace(l), "read: the pod's condition or event says it was preempted or evicted"}, true
		case reKubeNode.MatchString(l):
			return NodeFailure, "the job's pod was deleted because its node failed or became unreachable", []string{strings.TrimSpace(l), "read: the pod was taken off a node that stopped answering (a NoExecute taint: not-ready or unreachable)"}, true
		}
	}
	sig := SignalName(st.Signal)
	from := fmt.Sprintf("%s from %s (pid %d)", sig, st.Sender, st.SenderPID)
	switch st.Sender {
	case "slurmstepd", "slurmd", "srun":
		if !st.Deadline.IsZero() && !st.At.IsZero() && !st.At.Before(st.Deadline.Add(-90*time.Second)) {
			return TimeLimit, "Slurm ended the job at its time limit",
				[]string{from + " at " + st.At.UTC().Format(time.RFC3339), "read: the job's end time (SLURM_JOB_END_TIME) was " + st.Deadline.UTC().Format(time.RFC3339) + ": the signal is the time limit's"}, true
		}
		return Cancelled, "Slurm ended the job before its time limit (scancel, preemption or an administrator)",
			[]string{from, "read: Slurm's step daemon sent it before the job's end time; Slurm's line in the job's output file (\"CANCELLED AT … DUE TO …\") names which"}, true
	}
	return "", "", nil, false
}

// kubeSummary says which kind of preemption or eviction a pod's line
// names.
func kubeSummary(l string) string {
	switch {
	case strings.Contains(l, "PreemptionBy"), strings.Contains(l, "Preempted by"):
		return "the job's pod was preempted by the scheduler for a higher-priority pod"
	case strings.Contains(l, "EvictionByEvictionAPI"):
		return "the job's pod was evicted through the Eviction API (a node drain or another eviction)"
	case strings.Contains(l, "TerminationByKubelet"), strings.Contains(l, "low on resource"), strings.Contains(l, "node shutdown"):
		return "the job's pod was ended by its node's kubelet (node pressure or a node shutdown)"
	}
	return "the job's pod was preempted or evicted"
}

// schedulerAdvice is each scheduler reason's advice before the run's own
// numbers (postmortem's SchedulerEnd adds those: the newest checkpoint's
// age, the time a save took, the --signal lead to set).
var schedulerAdvice = map[string][]string{
	TimeLimit: {"Ask the scheduler to warn the job before its limit and save then: `#SBATCH --signal=B:USR1@N` (N seconds before the limit; `B:` sends it to the batch shell, which must forward it) with a handler that saves on SIGUSR1, or a time limit the job fits in.",
		"Make the job resumable: `#SBATCH --requeue` and `vramguard run --resume-from DIR`, so a requeued job continues from its newest checkpoint."},
	Preempted: {"Preemption sends SIGTERM and waits the grace time (Slurm's GraceTime, a pod's terminationGracePeriodSeconds) before SIGKILL: save on SIGTERM, within that time.",
		"Make the job resumable: `#SBATCH --requeue` (or a Job/controller that recreates the pod) and `vramguard run --resume-from DIR`."},
	Cancelled:   {"Nothing to fix if it was meant. scancel sends SIGTERM, then SIGKILL after KillWait (30 s by default): a job that saves on SIGTERM within that time loses nothing; `vramguard run --resume-from DIR` continues from its newest checkpoint."},
	NodeFailure: {"A node failure gives no warning: only a checkpoint saved before it survives. Save on a cadence, and make the job requeue (`#SBATCH --requeue`; Slurm requeues a requeueable job after a node failure) with `vramguard run --resume-from DIR`."},
}

// SlurmDeadline returns the job's end time from its environment (Slurm's
// SLURM_JOB_END_TIME, seconds since the epoch, set in every step of an
// allocation), for Stop.Deadline; zero when unset or not a number. It is the
// end time when the job started: `scontrol update TimeLimit=` later is not
// seen.
func SlurmDeadline(getenv func(string) string) time.Time {
	v := strings.TrimSpace(getenv("SLURM_JOB_END_TIME"))
	if v == "" {
		return time.Time{}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

// stopNotes is what else was read of a stop (Stop.Notes), for the evidence.
func stopNotes(in Input) []string {
	if in.Stop == nil {
		return nil
	}
	return in.Stop.Notes
}
