package ranks

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/units"
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

// failureWord is Rank.Failure for k ("" for a rank not seen to end).
func failureWord(k kind) string {
	switch k {
	case kindOK:
		return FailureOK
	case kindOwn:
		return FailureOwn
	case kindExternal:
		return FailureExternal
	case kindConsequence:
		return FailureConsequence
	case kindUnknown:
		return FailureUnknown
	}
	return ""
}

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

// pickRanks keeps one process per rank: the one that joined the process
// group (the probe's torch.distributed view), else the topmost process with
// that rank (a DataLoader worker inherits its rank's environment). Only the
// most specific kind of identity counts: torchrun under srun gives its
// agent SLURM_PROCID and its workers RANK.
func pickRanks(procs []Process) []*rankState {
	tier := func(src string) int {
		switch src {
		case SourceTorch, SourceTorchrun, SourceSpawnOrder:
			return 0
		case SourceOpenMPI, SourcePMI:
			return 1
		}
		return 2
	}
	best := 3
	for _, p := range procs {
		best = min(best, tier(p.Identity.Source))
	}
	byPID := map[int]Process{}
	for _, p := range procs {
		byPID[p.PID] = p
	}
	byRank := map[int]*rankState{}
	for _, p := range procs {
		if tier(p.Identity.Source) != best {
			continue
		}
		if parent, ok := byPID[p.PPID]; ok && parent.Identity.Rank == p.Identity.Rank && p.Identity.Source != SourceTorch &&
			tier(parent.Identity.Source) == best {
			continue // a child of the rank: a DataLoader worker, a compile worker
		}
		cur := byRank[p.Identity.Rank]
		if cur == nil || (p.Identity.Source == SourceTorch && cur.p.Identity.Source != SourceTorch) ||
			(p.Identity.Source == cur.p.Identity.Source && p.PID < cur.p.PID && cur.p.Identity.Source != SourceTorch) {
			byRank[p.Identity.Rank] = &rankState{p: p, known: true}
		}
	}
	out := make([]*rankState, 0, len(byRank))
	for _, r := range byRank {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].p.Identity.Rank < out[b].p.Identity.Rank })
	return out
}

// SourceSpawnOrder is the identity of a child of mp.spawn known by its
// place among its siblings.
const SourceSpawnOrder = "mp.spawn's order"

// spawnOrder finds the ranks of mp.spawn's children that died before their
// probe reported a rank: mp.spawn starts its processes one after another,
// process i the i-th, so a parent with exactly world-size children, whose
// reported ranks are their places in PID order, gives each other child its
// place. Nothing is inferred where that does not hold.
func spawnOrder(procs, unranked []Process) []Process {
	type family struct {
		ranked   []Process
		unranked []Process
		world    int
	}
	fams := map[int]*family{}
	for _, p := range procs {
		if p.Identity.Source != SourceTorch || p.Identity.WorldSize == nil || p.PPID == 0 {
			continue
		}
		f := fams[p.PPID]
		if f == nil {
			f = &family{world: *p.Identity.WorldSize}
			fams[p.PPID] = f
		}
		f.ranked = append(f.ranked, p)
	}
	for _, p := range unranked {
		if f := fams[p.PPID]; f != nil && spawnChild(p.Argv) {
			f.unranked = append(f.unranked, p)
		}
	}
	var out []Process
	for _, f := range fams {
		if len(f.unranked) == 0 || len(f.ranked)+len(f.unranked) != f.world {
			continue
		}
		all := append(append([]Process(nil), f.ranked...), f.unranked...)
		sort.Slice(all, func(a, b int) bool { return all[a].PID < all[b].PID })
		ok := true
		for i, p := range all {
			if p.Identity.Source == SourceTorch && p.Identity.Rank != i {
				ok = false
			}
		}
		if !ok {
			continue
		}
		w := f.world
		for i, p := range all {
			if p.Identity.Source != SourceTorch {
				p.Identity = Identity{Rank: i, WorldSize: &w, Source: SourceSpawnOrder}
				out = append(out, p)
			}
		}
	}
	return out
}

// spawnChild reports whether argv is a child multiprocessing started with
// the spawn method ("-c 'from multiprocessing.spawn import spawn_main; …'
// --multiprocessing-fork"), as mp.spawn starts its processes; its resource
// tracker and forkserver are not.
func spawnChild(argv []string) bool {
	for _, a := range argv {
		if strings.Contains(a, "spawn_main(") {
			return true
		}
	}
	return false
}

// attribute gives each rank the output lines its prefix or a launcher's
// report names. A line that names a local rank ("[default2]:", torchrun's
// local_rank, mp.spawn's process index) goes to the process with that local
// rank, where local ranks are known. A rank that only a report names (its
// process never seen) is added.
func attribute(rs []*rankState, lines []diagnose.Line) []*rankState {
	byRank, byLocal := map[int]*rankState{}, map[int]*rankState{}
	for _, r := range rs {
		byRank[r.p.Identity.Rank] = r
		if l := r.p.Identity.LocalRank; l != nil {
			byLocal[*l] = r
		}
	}
	// a job of one rank (each Slurm task under its own vramguard run):
	// what it printed without a rank's prefix is its own
	var only *rankState
	if len(rs) == 1 {
		only = rs[0]
	}
	for _, l := range lines {
		if l.Rank < 0 {
			if only != nil {
				only.lines = append(only.lines, l)
			}
			continue
		}
		local := strings.HasPrefix(l.Source, "default") || strings.HasPrefix(l.Source, "local_rank") || strings.HasPrefix(l.Source, "mp.spawn")
		r := byRank[l.Rank]
		if local && byLocal[l.Rank] != nil {
			r = byLocal[l.Rank]
		}
		if r == nil && (strings.HasPrefix(l.Source, "mp.spawn") || l.Source == "torchrun root cause") {
			// a rank whose process was not seen, named by its launcher
			from := "mp.spawn's report"
			if l.Source == "torchrun root cause" {
				from = "torchrun's report"
			}
			r = &rankState{p: Process{Identity: Identity{Rank: l.Rank, Source: from}}}
			byRank[l.Rank] = r
			rs = append(rs, r)
		}
		if r == nil {
			continue
		}
		r.lines = append(r.lines, l)
		if e, ok := diagnose.ParseSpawnExit(l.Text); ok && r.p.Exit == nil {
			// how mp.spawn saw it end, where its end was not seen
			x := &Exit{Code: e.Code}
			if e.Signal != "" {
				x = &Exit{Code: -1, Signal: signalNamed(e.Signal)}
			}
			if x.Signal != 0 || e.Signal == "" {
				r.p.Exit, r.p.ExitFrom = x, "mp.spawn's report"
			}
		}
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].p.Identity.Rank < rs[b].p.Identity.Rank })
	return rs
}

// classify reads one rank's own evidence: the lines that are its, what the
// probe and torchrun's error file say, and how it ended.
func classify(r *rankState, j Job) {
	p := &r.p
	in := diagnose.Input{ExitCode: 0}
	if p.Exit != nil {
		in.ExitCode, in.Signal = p.Exit.Code, p.Exit.Signal
	}
	for _, l := range r.lines {
		in.Tail = append(in.Tail, l.Text)
	}
	for _, rep := range []*Report{p.ErrorFile, p.Exception} {
		if rep != nil && rep.Text != "" && !inLines(r.lines, rep.Text) {
			in.Tail = append(in.Tail, rep.Text)
		}
	}
	if p.OOMKill != "" {
		in.KernelOOM = []string{p.OOMKill}
	} else if r.victim {
		in.OOMKills = 1
	}
	reading := diagnose.Read(in.Tail)
	r.dec, r.hasDec = reading.Decisive()
	r.v = diagnose.Classify(in)
	if (r.victim || p.OOMKill != "") && p.PeakHost > 0 {
		s := "the highest resident memory seen of this process: " + units.FormatBytes(p.PeakHost)
		if l := j.Input.Limit; l > 0 && j.Input.LimitSource != "host" {
			s += fmt.Sprintf("; the job's memory limit: %s (%s)", units.FormatBytes(l), j.Input.LimitSource)
			if j.Input.LimitPeak > 0 {
				s += fmt.Sprintf(", whose charge peaked at %s", units.FormatBytes(j.Input.LimitPeak))
			}
		}
		r.v.Evidence = append(r.v.Evidence, s)
	}
	if r.victim {
		r.v.Evidence = append(r.v.Evidence, "no kernel line named the OOM killer's victim (the kernel log was not readable, or said nothing): this rank was the first process of the job to die of SIGKILL, so it is taken for it")
	}
	r.t = p.Ended
	if !p.Closed.IsZero() && (r.t.IsZero() || p.Closed.Before(r.t)) {
		r.t = p.Closed
	}
	for _, rep := range []*Report{p.Exception, p.ErrorFile} {
		if rep != nil && !rep.T.IsZero() && (r.t.IsZero() || rep.T.Before(r.t)) {
			r.t = rep.T
		}
	}
	crash := p.Exit != nil && (p.Exit.Signal == syscall.SIGSEGV || p.Exit.Signal == syscall.SIGBUS || p.Exit.Signal == syscall.SIGABRT ||
		p.Exit.Signal == syscall.SIGILL || p.Exit.Signal == syscall.SIGFPE)
	external := p.Exit != nil && (p.Exit.Signal == syscall.SIGTERM || p.Exit.Signal == syscall.SIGINT || p.Exit.Signal == syscall.SIGHUP ||
		p.Exit.Signal == syscall.SIGQUIT || p.Exit.Signal == syscall.SIGKILL)
	switch {
	case r.v.Reason == diagnose.HostOOMKilled || crash:
		r.kind = kindOwn
	case r.hasDec && r.dec.Role == diagnose.Consequence:
		r.kind = kindConsequence
	case r.hasDec && (r.dec.Role == diagnose.Cause || (r.dec.Role == diagnose.Hint && !external)):
		r.kind = kindOwn
	case external:
		r.kind = kindExternal
	case r.v.Reason == diagnose.PythonException:
		r.kind = kindOwn
	case p.Exit != nil && p.Exit.Status() == 0:
		r.kind = kindOK
	case p.Exit != nil:
		r.kind = kindUnknown
	case !p.Ended.IsZero():
		// it ended, its status unread (another parent reaped it at once,
		// on a kernel that keeps no status for a pidfd)
		r.kind = kindUnknown
		r.v = diagnose.Verdict{Reason: diagnose.ExitError, ExitCode: -1,
			Summary:  "it ended, printing no error, and its exit status could not be read",
			Evidence: []string{"its exit status could not be read: its launcher reaped it at once, and this kernel keeps no exit status for a pidfd (Linux 6.15 does)"},
			Advice:   []string{"Read the end of the log (`vramguard logs RUN`) for the job's own error message."}}
	default:
		r.kind = kindNone
	}
}

// signalNamed is the signal called name ("SIGKILL"), 0 when unknown.
func signalNamed(name string) syscall.Signal {
	for s := syscall.Signal(1); s < 65; s++ {
		if diagnose.SignalName(s) == name {
			return s
		}
	}
	return 0
}

func inLines(lines []diagnose.Line, text string) bool {
	text = strings.TrimSpace(text)
	for _, l := range lines {
		if strings.TrimSpace(l.Text) == text {
			return true
		}
	}
	return false
}

// failed reports whether the rank ended in failure of any kind.
// sigkillTie is how close two SIGKILLed processes' ends are seen when the
// kernel killed them together: a process's end is seen once its memory is
// freed, so the OOM killer's victim, the largest, is often seen last.
const sigkillTie = 500 * time.Millisecond

// oomVictims are the ranks taken for the n OOM kills no kernel line named:
// of the first n processes of the job to die of SIGKILL, and the ranks
// that died of it within sigkillTie of them, the n that held the most
// memory (the OOM killer picks the largest); in the order they died where
// their memory is not known.
func oomVictims(rs []*rankState, killed map[int]int, n int) []*rankState {
	var first, cands []*rankState
	for _, r := range rs {
		if i, ok := killed[r.p.PID]; ok && r.p.OOMKill == "" {
			cands = append(cands, r)
			if i < n {
				first = append(first, r)
			}
		}
	}
	if len(first) == 0 {
		return nil
	}
	var out []*rankState
	for _, c := range cands {
		for _, f := range first {
			if d := c.p.Ended.Sub(f.p.Ended); c == f || (!c.p.Ended.IsZero() && !f.p.Ended.IsZero() && d > -sigkillTie && d < sigkillTie) {
				out = append(out, c)
				break
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *rankState) int {
		if a.p.PeakHost != b.p.PeakHost {
			return cmp.Compare(b.p.PeakHost, a.p.PeakHost)
		}
		return cmp.Compare(killed[a.p.PID], killed[b.p.PID])
	})
	return out[:min(n, len(out))]
}

// killedWith: r died of SIGKILL within sigkillTie before root, an OOM
// killer's victim, was seen to end: killed together with it.
func killedWith(r, root *rankState) bool {
	return root.victim && r.p.Exit != nil && r.p.Exit.Signal == syscall.SIGKILL && !r.t.IsZero() && !root.t.IsZero() &&
		root.t.Sub(r.t) < sigkillTie
}

func (r *rankState) failed() bool { return r.kind != kindOK && r.kind != kindNone }

// firstFailure is the rank that failed first: the earliest failure of its
// own (an error, a crash, an OOM kill); without one the earliest rank ended
// from outside or with an unexplained error. Ranks that only read a failure
// elsewhere are never the root cause.
func firstFailure(rs []*rankState) *rankState {
	for _, k := range [][]kind{{kindOwn}, {kindExternal, kindUnknown}} {
		var best *rankState
		for _, r := range rs {
			if !slicesContains(k, r.kind) {
				continue
			}
			switch {
			case best == nil:
				best = r
			case best.t.IsZero() && !r.t.IsZero():
				best = r
			case !r.t.IsZero() && r.t.Before(best.t):
				best = r
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

func slicesContains(ks []kind, k kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// collectives are the functions of torch.distributed a stack waits in.
var collectives = []string{"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "reduce", "gather", "scatter", "recv", "send", "wait", "monitored_barrier"}

// waitsIn returns the collective a Python stack waits in ("all_reduce"),
// or "" when it waits in none: a frame of torch/distributed.
func waitsIn(stack string) string {
	for _, line := range strings.Split(stack, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "File ") || !strings.Contains(t, "torch/distributed/") {
			continue
		}
		// faulthandler: `File "…/distributed_c10d.py", line 1541 in all_reduce`
		if i := strings.LastIndex(t, " in "); i >= 0 {
			fn := t[i+4:]
			for _, c := range collectives {
				if fn == c {
					return fn
				}
			}
			return fn
		}
	}
	return ""
}

// innermost is the innermost frame of the current thread in a faulthandler
// dump ("File "train.py", line 7 in wait_for_data"), "" when none.
func innermost(stack string) string {
	lines := strings.Split(stack, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "Current thread") && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}

// stoppedRank is the rank of a stalled job that stopped making progress
// while the others wait for it in a collective: the one rank whose stack
// waits in no collective while others' do; else the rank with the fewest
// optimizer steps (the earliest last step among equals), when the ranks'
// counts differ.
func stoppedRank(rs []*rankState) *rankState {
	var waiting, not []*rankState
	for _, r := range rs {
		if r.p.StackText == "" {
			continue
		}
		r.stackIn = waitsIn(r.p.StackText)
		if r.stackIn != "" {
			waiting = append(waiting, r)
		} else {
			not = append(not, r)
		}
	}
	if len(waiting) > 0 && len(not) == 1 {
		return not[0]
	}
	cands := rs
	if len(waiting) > 0 && len(not) > 1 {
		cands = not
	}
	var lo, hi *rankState
	for _, r := range cands {
		if r.p.Steps == nil {
			continue
		}
		if lo == nil || *r.p.Steps < *lo.p.Steps || (*r.p.Steps == *lo.p.Steps && r.p.LastStep.Before(lo.p.LastStep)) {
			lo = r
		}
		if hi == nil || *r.p.Steps > *hi.p.Steps {
			hi = r
		}
	}
	if lo != nil && *lo.p.Steps < *hi.p.Steps {
		return lo
	}
	if len(waiting) > 0 && len(not) > 1 && lo != nil {
		return lo
	}
	return nil
}

// straggler is, in a job whose failed ranks all read a failure elsewhere
// (their collectives timed out), the rank that made the fewest optimizer
// steps, when one made fewer than every other: the rank the others waited
// for. nil when the counts do not single one out.
func straggler(rs []*rankState) *rankState {
	var lo *rankState
	n, tie := 0, false
	for _, r := range rs {
		if r.failed() && r.kind != kindConsequence {
			return nil
		}
		if r.p.Steps == nil {
			continue
		}
		n++
		switch {
		case lo == nil || *r.p.Steps < *lo.p.Steps:
			lo, tie = r, false
		case *r.p.Steps == *lo.p.Steps:
			tie = true
		}
	}
	if n < 2 || tie || lo.p.LastStep.IsZero() {
		return nil
	}
	// the others waited: their counts stood still long before they failed
	// (counts read a moment before a sudden end differ by chance), and
	// the straggler's stopped before theirs
	for _, r := range rs {
		if r == lo || r.p.Steps == nil {
			continue
		}
		if r.p.LastStep.IsZero() || r.t.IsZero() || r.t.Sub(r.p.LastStep) < stragglerWait || !lo.p.LastStep.Before(r.p.LastStep) {
			return nil
		}
	}
	return lo
}

// stragglerWait is how long the other ranks must have made no step before
// they failed for the rank with fewer steps to be the one they waited for:
// collective timeouts are longer (gloo's default 30 minutes, NCCL's 10).
const stragglerWait = 10 * time.Second

// how says how the root cause was found first.
func (r *rankState) how(rs []*rankState, stalled bool) string {
	name := r.name()
	if stalled {
		s := name + " stopped making progress"
		var waiting []string
		var in []string
		for _, o := range rs {
			if o != r && o.stackIn != "" {
				waiting = append(waiting, strconv.Itoa(o.p.Identity.Rank))
				if !strings.Contains(strings.Join(in, ","), o.stackIn) {
					in = append(in, o.stackIn)
				}
			}
		}
		if r.p.StackText != "" && r.stackIn == "" && len(waiting) > 0 {
			verb := "waits"
			if len(waiting) > 1 {
				verb = "wait"
			}
			s += fmt.Sprintf(": its Python stack waits in no collective, while %s %s %s in %s", rankWord(len(waiting)), strings.Join(waiting, ", "), verb, strings.Join(in, ", "))
		} else {
			s += ": it counted the fewest optimizer steps"
		}
		if r.p.Steps != nil {
			s += fmt.Sprintf(" (%s", plural(int(*r.p.Steps), "optimizer step"))
			if !r.p.LastStep.IsZero() {
				s += ", the last at " + clock(r.p.LastStep)
			}
			byCount := map[int64][]string{}
			var counts []int64
			for _, o := range rs {
				if o != r && o.p.Steps != nil {
					if byCount[*o.p.Steps] == nil {
						counts = append(counts, *o.p.Steps)
					}
					byCount[*o.p.Steps] = append(byCount[*o.p.Steps], strconv.Itoa(o.p.Identity.Rank))
				}
			}
			sort.Slice(counts, func(a, b int) bool { return counts[a] < counts[b] })
			for _, c := range counts {
				s += fmt.Sprintf("; %s %s made %d", rankWord(len(byCount[c])), strings.Join(byCount[c], ", "), c)
			}
			s += ")"
		}
		return s
	}
	if !r.known {
		return name + " failed first, as the launcher's report says (its process was not seen)"
	}
	var next *rankState
	for _, o := range rs {
		if o == r || !o.failed() || o.t.IsZero() {
			continue
		}
		if next == nil || o.t.Before(next.t) {
			next = o
		}
	}
	s := name + " failed first"
	if !r.t.IsZero() {
		s += " (at " + clock(r.t)
		if next != nil && !next.t.Before(r.t) {
			s += fmt.Sprintf(", %s before rank %d, the next to fail", next.t.Sub(r.t).Round(time.Millisecond), next.p.Identity.Rank)
		}
		s += ")"
	}
	if r.kind == kindOwn {
		s += ": " + r.v.Reason
		if others := othersOwn(rs, r); others > 0 {
			s += fmt.Sprintf("; %s failed of its own later", plural(others, "other rank"))
		}
	} else {
		s += fmt.Sprintf(": no rank printed a failure of its own, and it was the first to end (%s)", r.v.Reason)
	}
	return s
}

func othersOwn(rs []*rankState, root *rankState) int {
	n := 0
	for _, o := range rs {
		if o != root && o.kind == kindOwn {
			n++
		}
	}
	return n
}

func (r *rankState) name() string {
	s := "rank " + strconv.Itoa(r.p.Identity.Rank)
	if r.p.PID > 0 {
		s += " (pid " + strconv.Itoa(r.p.PID) + ")"
	}
	return s
}

// collateral marks the ranks that ended because of root: they read its
// failure (a collective error, a closed connection), were stopped from
// outside after it, or exited with an error of no reason of their own
// after it. A rank with a failure of its own keeps its reason.
func collateral(rs []*rankState, root *rankState, stalled bool) {
	for _, r := range rs {
		if r == root {
			continue
		}
		var why string
		switch {
		case stalled && r.stackIn != "":
			why = fmt.Sprintf("it waits in %s (its Python stack) for rank %d, which stopped", r.stackIn, root.p.Identity.Rank)
		case stalled && (r.kind == kindExternal || r.kind == kindNone):
			why = fmt.Sprintf("it ended with the job, killed when the job stalled; rank %d stopped first", root.p.Identity.Rank)
		case r.kind == kindConsequence:
			why = fmt.Sprintf("%s (rank %d failed first", consequenceWords(r.dec), root.p.Identity.Rank)
			if !r.t.IsZero() && !root.t.IsZero() && r.t.After(root.t) {
				why += fmt.Sprintf(", %s before", r.t.Sub(root.t).Round(time.Millisecond))
			}
			why += "): " + strings.TrimSpace(r.dec.Text)
		case root.v.Reason == diagnose.HostOOMKilled && r.v.Reason == diagnose.HostOOMKilled && (r.t.IsZero() || root.t.IsZero() || !r.t.Before(root.t)):
			why = fmt.Sprintf("the OOM killer killed it too, after rank %d", root.p.Identity.Rank)
			if !r.t.IsZero() && !root.t.IsZero() {
				why += fmt.Sprintf(" (%s later)", r.t.Sub(root.t).Round(time.Millisecond))
			}
			why += fmt.Sprintf(", while the memory rank %d filled the cgroup with was being freed", root.p.Identity.Rank)
			if r.p.PeakHost > 0 && root.p.PeakHost > 0 {
				why += fmt.Sprintf(" (this rank held at most %s, rank %d %s)", units.FormatBytes(r.p.PeakHost), root.p.Identity.Rank, units.FormatBytes(root.p.PeakHost))
			}
		case (r.kind == kindExternal || r.kind == kindUnknown) && (r.t.IsZero() || root.t.IsZero() || !r.t.Before(root.t) || killedWith(r, root)):
			why = exitWords(r.p.Exit)
			switch {
			case r.t.IsZero() || root.t.IsZero():
			case r.t.Before(root.t):
				why += fmt.Sprintf(" %s before rank %d was seen to end, killed with it (the larger's end is seen once its memory is freed)", root.t.Sub(r.t).Round(time.Millisecond), root.p.Identity.Rank)
			default:
				why += fmt.Sprintf(" %s after rank %d failed", r.t.Sub(root.t).Round(time.Millisecond), root.p.Identity.Rank)
			}
			if r.kind == kindExternal {
				why += ", with no error of its own: the launcher stopping the ranks that were left (mp.spawn, torchrun), or vramguard ending what was left of the job"
			} else {
				why += ", with no error of its own in what vramguard read"
			}
		default:
			continue
		}
		r.out.Reason, r.out.Collateral = diagnose.PeerFailed, true
		r.out.Evidence = append([]string{why}, r.timedExit()...)
	}
}

// timedExit is the rank's end as evidence, with where it was read ("" none).
func (r *rankState) timedExit() []string {
	if r.p.Exit == nil || r.p.ExitFrom == "" {
		return nil
	}
	if r.p.Ended.IsZero() {
		return []string{fmt.Sprintf("%s (read from %s)", exitWords(r.p.Exit), r.p.ExitFrom)}
	}
	return []string{fmt.Sprintf("%s at %s (read from %s)", exitWords(r.p.Exit), clock(r.p.Ended), r.p.ExitFrom)}
}

// allPeers handles a job none of whose ranks failed of its own while some
// read a failure elsewhere: those ranks are collateral of a failure
// vramguard did not see (another node's rank, or one that printed nothing).
func allPeers(rs []*rankState) {
	for _, r := range rs {
		if r.kind == kindConsequence {
			r.out.Reason, r.out.Collateral = diagnose.PeerFailed, true
			r.out.Evidence = append([]string{consequenceWords(r.dec) + ": " + strings.TrimSpace(r.dec.Text)}, r.timedExit()...)
		}
	}
}

func consequenceWords(f diagnose.Failure) string {
	switch f.Kind {
	case diagnose.KindCollectiveTimeout:
		return "a collective timed out waiting for another rank"
	case diagnose.KindPeerClosed:
		return "a peer closed its connection"
	case diagnose.KindLauncherStop:
		return "the launcher stopped it"
	case diagnose.KindSpawnChild:
		return "it lost its parent"
	}
	return "it reported a failure elsewhere"
}

func exitWords(e *Exit) string {
	switch {
	case e == nil:
		return "it ended"
	case e.Signal != 0:
		return "ended by " + diagnose.SignalName(e.Signal)
	}
	return fmt.Sprintf("exited with status %d", e.Code)
}

// render is the rank as explain shows it, with its own reason.
func (r *rankState) render() Rank {
	p := r.p
	out := Rank{Rank: p.Identity.Rank, LocalRank: p.Identity.LocalRank, WorldSize: p.Identity.WorldSize, NodeRank: p.Identity.NodeRank,
		Node: p.Node, IdentityFrom: p.Identity.Source, PID: p.PID}
	out.OptimizerSteps = p.Steps
	out.Failure, out.FailedAt = failureWord(r.kind), r.t
	if p.Exit != nil {
		c := p.Exit.Status()
		out.ExitCode = &c
		if p.Exit.Signal != 0 {
			n := diagnose.SignalName(p.Exit.Signal)
			out.Signal = &n
		}
	}
	if !p.Ended.IsZero() {
		t := p.Ended
		out.EndedAt = &t
	}
	if p.PeakHost > 0 {
		v := p.PeakHost
		out.PeakHostBytes = &v
	}
	out.PeakGPUBytes = p.PeakGPU
	out.StacksPath = p.Stacks
	switch r.kind {
	case kindNone:
		out.Reason = ""
	case kindOK:
		out.Reason = diagnose.Success
	default:
		out.Reason = r.v.Reason
	}
	out.Evidence = []string{}
	if r.kind != kindOK && r.kind != kindNone {
		r.v.Evidence = r.ownEvidence()
		out.Evidence = append(out.Evidence, r.v.Evidence...)
	}
	out.Evidence = append(out.Evidence, r.timedExit()...)
	for i := len(r.lines) - 1; i >= 0; i-- {
		if t := strings.TrimSpace(r.lines[i].Text); t != "" {
			out.LastLine = truncate(t, 300)
			break
		}
	}
	if out.LastLine == "" && p.Exception != nil {
		out.LastLine = truncate(strings.TrimSpace(p.Exception.Text), 300)
	}
	return out
}

var reExitEvidence = regexp.MustCompile(`^(?:exit status \d+|ended by signal SIG\w+ \(exit status \d+\))$`)

// ownEvidence is the rank's verdict's evidence as the rank's own: a line
// that came from a report says which (the probe, torchrun's error file),
// and the bare exit status gives way to the timed one render adds.
func (r *rankState) ownEvidence() []string {
	var out []string
	for _, e := range r.v.Evidence {
		if r.p.Exit != nil && r.p.ExitFrom != "" && reExitEvidence.MatchString(e) {
			continue
		}
		for _, rep := range []*Report{r.p.ErrorFile, r.p.Exception} {
			if rep != nil && rep.From != "" && strings.TrimSpace(e) == truncate(strings.TrimSpace(rep.Text), 500) {
				e += " (reported by " + rep.From + ")"
				break
			}
		}
		out = append(out, e)
	}
	return out
}

// jobVerdict is the job's verdict once its ranks are read: the root
// cause's reason and evidence for a job that failed by itself; the job's
// own verdict (with the stopped rank named) for one vramguard stalled,
// stopped or restarted.
func jobVerdict(j Job, rs []*rankState, root *rankState, res *Result) diagnose.Verdict {
	v := j.Verdict
	switch v.Reason {
	case diagnose.StartFailed, diagnose.Interrupted, diagnose.Restarted, diagnose.Success:
		return v
	case diagnose.Stalled:
		if root != nil {
			v.Evidence = append([]string{res.RootCause.How}, v.Evidence...)
			v.Summary = fmt.Sprintf("rank %d stopped making progress and the other ranks waited for it, so the job made none and was killed", root.p.Identity.Rank)
		}
		return v
	}
	if root != nil && res.RootCause.Reason == diagnose.Stalled {
		// the ranks' own collective timeouts ended the job
		sv := diagnose.Verdict{Reason: diagnose.Stalled, ExitCode: v.ExitCode, Signal: v.Signal,
			Summary: fmt.Sprintf("rank %d stopped making progress, and the other ranks' collectives timed out waiting for it", root.p.Identity.Rank),
			Advice: []string{"Find out why that rank stopped: its last output (`vramguard logs RUN`); run with --stall-timeout so vramguard collects every rank's Python stacks before the collectives time out.",
				"Uneven data (one rank with fewer batches), a rank waiting on I/O, or a rank in a different code path (a collective only some ranks call) are the usual causes."}}
		sv.Evidence = append(sv.Evidence, res.RootCause.How)
		var peers []string
		for _, r := range rs {
			if r.out.Collateral {
				peers = append(peers, strconv.Itoa(r.p.Identity.Rank))
			}
		}
		if len(peers) > 0 {
			sv.Evidence = append(sv.Evidence, fmt.Sprintf("%s %s ended because of it (peer_failed; each rank's evidence in `explain`)", rankWord(len(peers)), strings.Join(peers, ", ")))
		}
		return sv
	}
	if root == nil {
		var peers []string
		for _, r := range rs {
			if r.out.Reason == diagnose.PeerFailed {
				peers = append(peers, strconv.Itoa(r.p.Identity.Rank))
			}
		}
		if len(peers) == 0 || len(peers) < countFailed(rs) {
			return v
		}
		pv := diagnose.Verdict{Reason: diagnose.PeerFailed, ExitCode: v.ExitCode, Signal: v.Signal, ExceptionType: v.ExceptionType,
			Summary: "every rank of the job ended because another rank failed, and no rank here failed of its own: the first failure was elsewhere (a rank on another node) or its rank printed nothing",
			Advice: []string{"Find the rank that failed first: on another node, its own run (`vramguard explain` there); here, read every rank's log (`vramguard logs RUN`).",
				"A collective timeout means a peer stopped: set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a timeout in init_process_group(timeout=...) so ranks fail fast and say so."}}
		pv.Evidence = append([]string{fmt.Sprintf("%s %s ended because of a failure elsewhere (peer_failed)", rankWord(len(peers)), strings.Join(peers, ", "))}, v.Evidence...)
		return pv
	}
	rv := root.v
	if root.kind != kindOwn && v.Reason != diagnose.ExitError && v.Reason != diagnose.PythonException && v.Reason != diagnose.NCCLError {
		// the first rank to end has no failure of its own, and the job's
		// reading says more: keep it, with the ranks said
		rv = v
	}
	out := diagnose.Verdict{Reason: rv.Reason, Summary: rv.Summary, ExitCode: v.ExitCode, Signal: v.Signal, ExceptionType: rv.ExceptionType,
		OOM: rv.OOM, Advice: rv.Advice}
	if rv.Reason != v.Reason || out.Summary == "" {
		out.Summary = rv.Summary
	}
	out.Summary = fmt.Sprintf("rank %d: %s", root.p.Identity.Rank, out.Summary)
	out.Evidence = append(out.Evidence, res.RootCause.How)
	out.Evidence = append(out.Evidence, rv.Evidence...)
	var peers []string
	for _, r := range rs {
		if r.out.Collateral {
			peers = append(peers, strconv.Itoa(r.p.Identity.Rank))
		}
	}
	if len(peers) > 0 {
		out.Evidence = append(out.Evidence, fmt.Sprintf("%s %s ended because of it (peer_failed; each rank's evidence in `explain`)", rankWord(len(peers)), strings.Join(peers, ", ")))
	}
	if out.ExitCode != 0 && (root.p.Exit == nil || root.p.Exit.Status() != out.ExitCode) {
		out.Evidence = append(out.Evidence, fmt.Sprintf("the job's own exit status is %d (its launcher's)", out.ExitCode))
	}
	return out
}

func countFailed(rs []*rankState) int {
	n := 0
	for _, r := range rs {
		if r.failed() {
			n++
		}
	}
	return n
}

func rankWord(n int) string {
	if n == 1 {
		return "rank"
	}
	return "ranks"
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.Local().Format("15:04:05.000")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
