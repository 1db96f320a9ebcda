// The ranks and the job's verdict as explain shows them: each rank's row and
// evidence, the job's verdict once its ranks are read, and their words.

package ranks

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
)

func (r *rankState) name() string {
	s := "rank " + strconv.Itoa(r.p.Identity.Rank)
	if r.p.PID > 0 {
		s += " (pid " + strconv.Itoa(r.p.PID) + ")"
	}
	return s
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
		if e := collateralEvidence(rs); e != "" {
			sv.Evidence = append(sv.Evidence, e)
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
	if e := collateralEvidence(rs); e != "" {
		out.Evidence = append(out.Evidence, e)
	}
	if out.ExitCode != 0 && (root.p.Exit == nil || root.p.Exit.Status() != out.ExitCode) {
		out.Evidence = append(out.Evidence, fmt.Sprintf("the job's own exit status is %d (its launcher's)", out.ExitCode))
	}
	return out
}

// collateralEvidence names the ranks that ended because of the root cause
// ("" when none did).
func collateralEvidence(rs []*rankState) string {
	var peers []string
	for _, r := range rs {
		if r.out.Collateral {
			peers = append(peers, strconv.Itoa(r.p.Identity.Rank))
		}
	}
	if len(peers) == 0 {
		return ""
	}
	return fmt.Sprintf("%s %s ended because of it (peer_failed; each rank's evidence in `explain`)", rankWord(len(peers)), strings.Join(peers, ", "))
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
