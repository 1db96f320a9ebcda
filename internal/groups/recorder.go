package groups

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/ranks"
)

// DefaultWait is how long a run whose ranks only read a failure elsewhere
// waits, as its attempt ends, for the record of the rank that failed
// first (its node's supervisor writes it as that rank ends, which is
// usually before the others learn of it).
const DefaultWait = 10 * time.Second

// Recorder shares one run's ranks with the job's other supervisors. It is
// what `vramguard run` gives its supervisor for a run with a group.
type Recorder struct {
	Dir   Dir
	Group string
	// RunID, RunName, StateDir and Host are the run's, as Member has them;
	// Node, when set (run --node), names the node of every rank of the
	// run rather than its environment's SLURMD_NODENAME.
	RunID, RunName, StateDir, Host, Node string
	// Wait bounds the wait for the first failure's record (0: DefaultWait).
	Wait time.Duration
	Now  func() time.Time
	// Sleep waits d between reads of the group's records, or until ctx
	// ends (nil: the wall clock's). A fake clock replaces Now and Sleep.
	Sleep func(ctx context.Context, d time.Duration)
	// Warn hears what could not be written (nil: nothing said).
	Warn func(error)

	started *ranks.Rank // the rank Started recorded
}

func (r *Recorder) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// pollEvery is how often a run waiting for the first failure's record
// reads the group's records again.
const pollEvery = 200 * time.Millisecond

func (r *Recorder) sleep(ctx context.Context, d time.Duration) {
	if r.Sleep != nil {
		r.Sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *Recorder) warn(err error) {
	if err != nil && r.Warn != nil {
		r.Warn(err)
	}
}

func (r *Recorder) member(rk ranks.Rank) ranks.Member {
	if r.Node != "" {
		rk.Node = r.Node
	}
	if rk.Node == "" {
		rk.Node = r.Host
	}
	return ranks.Member{Group: r.Group, RunID: r.RunID, RunName: r.RunName, StateDir: r.StateDir, Host: r.Host,
		Rank: rk, Failure: rk.Failure, FailedAt: rk.FailedAt, Written: r.now()}
}

// Started records a rank the run's environment names (a Slurm task's
// SLURM_PROCID) as running.
func (r *Recorder) Started(p ranks.Place) {
	if p.ID == nil {
		return
	}
	rk := ranks.Rank{Rank: p.ID.Rank, LocalRank: p.ID.LocalRank, WorldSize: p.ID.WorldSize, NodeRank: p.ID.NodeRank,
		Node: p.Node, IdentityFrom: p.ID.Source, Evidence: []string{}}
	m := r.member(rk)
	m.Status = ranks.MemberRunning
	r.started = &rk
	r.warn(r.Dir.Write(m))
}

// Ended records each rank of an ended attempt. When the attempt's ranks
// only read a failure elsewhere, it waits (at most Wait) for the record of
// the rank that failed first and names it, its node and the command that
// tells the whole story in pm, rather than leaving the user to find it.
func (r *Recorder) Ended(ctx context.Context, pm *postmortem.Postmortem) {
	if len(pm.Ranks) == 0 && r.started != nil {
		// its rank was not judged (it ended before it was read): the run's
		// own end is its rank's
		rk := *r.started
		rk.Reason, rk.Evidence, rk.FailedAt = pm.Verdict.Reason, pm.Verdict.Evidence, pm.EndedAt
		c := pm.Verdict.ExitCode
		rk.ExitCode = &c
		switch pm.Verdict.Reason {
		case diagnose.Success:
			rk.Failure = ranks.FailureOK
		case diagnose.PeerFailed:
			rk.Failure = ranks.FailureConsequence
		default:
			rk.Failure = ranks.FailureUnknown
		}
		m := r.member(rk)
		m.Status, m.Summary = ranks.MemberEnded, pm.Verdict.Summary
		r.warn(r.Dir.Write(m))
		return
	}
	if len(pm.Ranks) == 0 {
		return
	}
	local := map[int]bool{}
	ownHere := false
	for _, rk := range pm.Ranks {
		m := r.member(rk)
		m.Status = ranks.MemberEnded
		if len(pm.Ranks) == 1 || (pm.RootCause != nil && pm.RootCause.Rank == rk.Rank) {
			m.Summary = strings.TrimPrefix(pm.Verdict.Summary, fmt.Sprintf("rank %d: ", rk.Rank))
		}
		r.warn(r.Dir.Write(m))
		local[rk.Rank] = true
		if rk.Failure == ranks.FailureOwn || rk.Failure == ranks.FailureExternal || rk.Failure == ranks.FailureUnknown {
			ownHere = true
		}
	}
	story := "`vramguard explain --group " + shellWord(r.Group) + "`"
	peer := pm.Verdict.Reason == diagnose.PeerFailed
	if ownHere || pm.Verdict.Reason == diagnose.Success || pm.Verdict.Reason == diagnose.Interrupted || pm.Verdict.Reason == diagnose.Restarted {
		if pm.Verdict.Reason != diagnose.Success && pm.Verdict.Reason != diagnose.Interrupted {
			pm.Verdict.Advice = append(pm.Verdict.Advice, story+" tells the whole job's story: every rank on every node, and the one that failed first.")
		}
		return
	}
	// no rank here failed of its own: the first failure may be another
	// node's; a rank that only read a peer's failure waits for its record
	var wait time.Duration
	if peer {
		if wait = r.Wait; wait <= 0 {
			wait = DefaultWait
		}
	}
	deadline := r.now().Add(wait)
	var root *ranks.GroupRoot
	for {
		if g, err := r.Dir.Story(r.Group); err == nil && g.RootCause != nil && !local[g.RootCause.Rank] {
			root = g.RootCause
			break
		}
		if !r.now().Before(deadline) || ctx.Err() != nil {
			break
		}
		r.sleep(ctx, pollEvery)
	}
	var advice []string
	for _, a := range pm.Verdict.Advice {
		if !strings.HasPrefix(a, "Find the rank that failed first") {
			advice = append(advice, a)
		}
	}
	if root == nil && !peer {
		pm.Verdict.Advice = append(pm.Verdict.Advice, story+" tells the whole job's story: every rank on every node, and the one that failed first.")
		return
	}
	if root == nil {
		pm.Verdict.Advice = append([]string{fmt.Sprintf("No rank of group %s recorded a failure of its own within %s: %s shows every rank recorded so far, on every node.", r.Group, wait, story)}, advice...)
		return
	}
	where := fmt.Sprintf("rank %d on %s", root.Rank, root.Node)
	pm.RootCause = &ranks.RootCause{Rank: root.Rank, Node: root.Node, PID: root.PID, Reason: root.Reason,
		How: fmt.Sprintf("%s failed first (%s, its own run %s there): %s", where, root.Reason, root.RunID, root.How)}
	if peer {
		pm.Verdict.Summary = fmt.Sprintf("%s failed first (%s); the ranks here ended because of it", where, root.Summary)
	} else {
		pm.Verdict.Summary = fmt.Sprintf("%s failed first (%s); then this run's: %s", where, root.Summary, pm.Verdict.Summary)
	}
	pm.Verdict.Evidence = append([]string{fmt.Sprintf("%s failed first, as its record in group %s says: %s", where, r.Group, root.Reason)}, pm.Verdict.Evidence...)
	pm.Verdict.Advice = append([]string{story + " tells the whole story: every rank on every node; " + where + " failed first, with its own evidence."}, advice...)
	for i := range pm.Ranks {
		if pm.Ranks[i].Collateral {
			pm.Ranks[i].Evidence = append([]string{where + " failed first (" + root.Reason + ")"}, pm.Ranks[i].Evidence...)
		}
	}
}

// shellWord quotes s for a shell when it needs it.
func shellWord(s string) string {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:/+=@", c)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
