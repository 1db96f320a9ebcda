package ranks

import (
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
)

// Exit is how a process ended.
type Exit struct {
	Code   int            // the exit code; -1 when a signal ended it
	Signal syscall.Signal // 0 when it exited
}

// Status is the status a shell reports: the code, or 128+N for signal N.
func (e Exit) Status() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

// Report is a failure a process reported of itself outside its output.
type Report struct {
	Text string    // "RuntimeError: CUDA out of memory. …"
	T    time.Time // when it was reported
	From string    // "the probe, which saw it uncaught", "torchrun's error file PATH"
}

// Process is what vramguard knows of one process of the job that has a
// rank.
type Process struct {
	PID, PPID int
	// Argv is its command line, where known.
	Argv     []string
	Identity Identity
	Node     string
	// Ended is when the process ended (zero: not seen to end); Exit how
	// (nil: unknown), read from ExitFrom ("pidfd", "the shim", …).
	Ended    time.Time
	Exit     *Exit
	ExitFrom string
	// Closed is when its probe's connection closed: as it exits, before
	// its end is seen (a process's files close before it turns zombie).
	Closed time.Time
	// PeakHost is the highest resident memory seen of the process alone;
	// PeakGPU its highest GPU memory (nil: no GPU figure for it).
	PeakHost uint64
	PeakGPU  *uint64
	// Steps is the optimizer steps the probe counted in it (nil: not
	// probed); LastStep when the count last rose.
	Steps    *int64
	LastStep time.Time
	// Exception is its uncaught exception as the probe saw it; ErrorFile
	// what it wrote to torchrun's error file.
	Exception *Report
	ErrorFile *Report
	// OOMKill is the kernel's line naming it as an OOM killer's victim.
	OOMKill string
	// Stacks is the file its Python stacks were written to, StackText
	// what it holds ("" when none were collected).
	Stacks, StackText string
}

// Job is what Judge reads of one ended attempt.
type Job struct {
	Procs []Process
	// Tail is the job's output tail, oldest line first.
	Tail []string
	// Input is the job's classifier input and Verdict the job's verdict
	// as a whole (diagnose.Classify of Input).
	Input   diagnose.Input
	Verdict diagnose.Verdict
	// SIGKILLed lists the job's processes (ranks or not) that died of
	// SIGKILL, in the order they ended: with the cgroup's oom_kill counter
	// risen by N and no kernel line naming a victim (KernelNamed false),
	// the first N of them are taken for the OOM killer's victims.
	SIGKILLed   []int
	KernelNamed bool
	// Unranked are the job's other processes: a child of mp.spawn whose
	// rank was not reported before it died is known by its place among
	// its siblings (see pickRanks).
	Unranked []Process
}

// Rank is one rank as `explain` shows it (docs/CLI.md, `ranks`).
type Rank struct {
	Rank      int    `json:"rank"`
	LocalRank *int   `json:"local_rank"`
	WorldSize *int   `json:"world_size"`
	Node      string `json:"node"`
	NodeRank  *int   `json:"node_rank"`
	// IdentityFrom says where the rank was read (Identity.Source, or
	// "mp.spawn's report" for a rank known only from it).
	IdentityFrom string `json:"identity_from"`
	// PID is 0 for a rank known only from a launcher's report.
	PID      int        `json:"pid"`
	ExitCode *int       `json:"exit_code"`
	Signal   *string    `json:"signal"`
	EndedAt  *time.Time `json:"ended_at"`
	// Reason is the rank's own reason code, or peer_failed for a rank that
	// ended because another one failed (Collateral).
	Reason         string   `json:"reason"`
	Collateral     bool     `json:"collateral"`
	Evidence       []string `json:"evidence"`
	PeakHostBytes  *uint64  `json:"peak_host_bytes"`
	PeakGPUBytes   *uint64  `json:"peak_gpu_bytes"`
	OptimizerSteps *int64   `json:"optimizer_steps"`
	// LastLine is the last line of output known to be this rank's (by a
	// rank prefix, a launcher's report, or the exception the probe saw).
	LastLine string `json:"last_line"`
	// StacksPath holds its Python stacks, when they were collected.
	StacksPath string `json:"stacks_path,omitempty"`
	// Failure is how the rank ended on its own evidence, before any other
	// rank is weighed (the Failure constants); FailedAt is when, by its
	// node's clock (zero: unknown). A job's other nodes weigh them
	// (JudgeGroup).
	Failure  string    `json:"-"`
	FailedAt time.Time `json:"-"`
}

// How a rank ended on its own evidence (Rank.Failure).
const (
	FailureOwn         = "own"         // a failure of its own: an error, a crash, an OOM kill
	FailureExternal    = "external"    // a signal from outside, nothing of its own read
	FailureUnknown     = "unknown"     // a non-zero exit with nothing read of why
	FailureConsequence = "consequence" // it read a failure elsewhere (a peer's closed connection, a collective timeout)
	FailureOK          = "ok"          // it exited 0
)

// RootCause names the rank that failed first and why.
type RootCause struct {
	Rank   int    `json:"rank"`
	Node   string `json:"node"`
	PID    int    `json:"pid"`
	Reason string `json:"reason"`
	// How says how it was found first.
	How string `json:"how"`
}

// Result is Judge's account of the ranks.
type Result struct {
	Ranks     []Rank
	RootCause *RootCause
	// Verdict is the job's verdict: the root cause's reason and evidence
	// when one was found (the job's exit status stays its own), else the
	// job's own verdict with what was read of the ranks.
	Verdict diagnose.Verdict
}

// kind is how a rank ended, as far as its own evidence goes.
type kind int

const (
	kindOK          kind = iota // exited 0
	kindOwn                     // a failure of its own: a cause read, a crash, an OOM kill, an exception
	kindExternal                // a signal from outside (SIGTERM, SIGINT, SIGHUP, SIGKILL) and nothing of its own read
	kindConsequence             // it read a failure elsewhere: a collective timeout, a peer's closed connection
	kindUnknown                 // a non-zero exit, or an end, with nothing read of why
	kindNone                    // not seen to end, nothing read
)

type rankState struct {
	p       Process
	known   bool // a process was seen (not only a launcher's report)
	lines   []diagnose.Line
	kind    kind
	v       diagnose.Verdict
	dec     diagnose.Failure
	hasDec  bool
	t       time.Time // when it failed (earliest of its end and its reports)
	victim  bool      // taken for the cgroup OOM killer's victim
	out     Rank
	stackIn string // the collective its stack waits in ("" none)
}

// Judge reads how each rank ended and names the root cause. It returns nil
// when the job has no process with a rank.
func Judge(j Job) *Result {
	rs := pickRanks(append(j.Procs, spawnOrder(j.Procs, j.Unranked)...))
	rs = attribute(rs, diagnose.ReadLines(j.Tail))
	if len(rs) == 0 {
		return nil
	}
	res := &Result{Verdict: j.Verdict}
	killed := map[int]int{}
	for i, pid := range j.SIGKILLed {
		killed[pid] = i
	}
	// the cgroup's OOM kills with no kernel line naming the victim: the
	// first processes of the job to die of SIGKILL, where they are ranks
	if n := j.Input.OOMKills; n > 0 && !j.KernelNamed {
		for _, r := range oomVictims(rs, killed, n) {
			r.victim = true
		}
	}
	for _, r := range rs {
		classify(r, j)
	}
	stalled, straggled := j.Input.Stalled, false
	if r := j.Verdict.Reason; r == diagnose.Interrupted || r == diagnose.Restarted {
		// vramguard ended the job on request: no rank failed first
		for _, rk := range rs {
			rk.out = rk.render()
			if rk.failed() {
				rk.out.Reason = r
			}
			res.Ranks = append(res.Ranks, rk.out)
		}
		return res
	}
	var root *rankState
	if stalled {
		root = stoppedRank(rs)
	} else if root = firstFailure(rs); root == nil {
		// every rank read a failure elsewhere: the one that made the
		// fewest steps is the one the others' collectives waited for
		root = straggler(rs)
		straggled = root != nil
	}
	for _, r := range rs {
		r.out = r.render()
	}
	if root != nil && (stalled || straggled) {
		// what it was doing, rather than how it was killed
		ev := []string{}
		if f := innermost(root.p.StackText); f != "" {
			ev = append(ev, "its Python stack when the job stalled: "+f)
		}
		root.out.Evidence = append(ev, root.timedExit()...)
	}
	if root != nil {
		res.RootCause = &RootCause{Rank: root.p.Identity.Rank, Node: root.p.Node, PID: root.p.PID, Reason: root.v.Reason, How: root.how(rs, stalled || straggled)}
		if stalled || straggled {
			res.RootCause.Reason = diagnose.Stalled
			root.out.Reason, root.out.Collateral = diagnose.Stalled, false
			if straggled {
				res.RootCause.How += "; the others' collectives timed out waiting for it"
			}
		}
		collateral(rs, root, stalled)
	} else if !stalled {
		allPeers(rs)
	}
	if len(rs) == 1 && rs[0].out.LastLine == "" {
		// the job's one rank (a Slurm task's run): its output is the job's
		for i := len(j.Tail) - 1; i >= 0; i-- {
			if t := strings.TrimSpace(j.Tail[i]); t != "" {
				rs[0].out.LastLine = truncate(t, 300)
				break
			}
		}
	}
	for _, r := range rs {
		res.Ranks = append(res.Ranks, r.out)
	}
	res.Verdict = jobVerdict(j, rs, root, res)
	return res
}
