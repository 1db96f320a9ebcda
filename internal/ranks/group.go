package ranks

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Member is one rank of a job that spans supervisors (one `vramguard run`
// per Slurm task, per node), as its own supervisor judged it: the record
// every supervisor shares with the job's others (package groups keeps
// them).
type Member struct {
	// Group is the job's identity across nodes (run --group: the Slurm job
	// id, torchrun's run id, or a name).
	Group string `json:"group"`
	// RunID and RunName are the run that supervised the rank; StateDir
	// where it is recorded (`VRAMGUARD_HOME=DIR vramguard explain RUN`);
	// Host the machine it ran on.
	RunID    string `json:"run_id"`
	RunName  string `json:"run_name"`
	StateDir string `json:"state_dir"`
	Host     string `json:"host"`
	// Status is "running" until its run's attempt ended, then "ended".
	Status string `json:"status"`
	// Rank is the rank as its run's explain shows it, Failure and FailedAt
	// as its own evidence has them (Rank.Failure).
	Rank     Rank      `json:"rank"`
	Failure  string    `json:"failure"`
	FailedAt time.Time `json:"failed_at"`
	// Summary is its run's own verdict in words (its reason is Rank.Reason).
	Summary string `json:"summary"`
	// Written is when the record was written (its host's clock).
	Written time.Time `json:"written"`
}

// Member statuses.
const (
	MemberRunning = "running"
	MemberEnded   = "ended"
)

// GroupRank is one rank of a group's story.
type GroupRank struct {
	Rank
	RunID    string `json:"run_id"`
	RunName  string `json:"run_name"`
	Host     string `json:"host"`
	StateDir string `json:"state_dir"`
	Status   string `json:"status"`
	// OwnReason is the reason its own supervisor gave it (its Reason
	// becomes peer_failed when it is collateral), Summary that
	// supervisor's verdict in words.
	OwnReason string `json:"own_reason"`
	Summary   string `json:"summary"`
	// Failure and FailedAt are as the rank's own evidence has them
	// (Rank.Failure), FailedAt by its node's clock.
	Failure  string    `json:"failure"`
	FailedAt time.Time `json:"failed_at"`
}

// GroupRoot is the rank of a group that failed first.
type GroupRoot struct {
	Rank     int      `json:"rank"`
	Node     string   `json:"node"`
	PID      int      `json:"pid"`
	RunID    string   `json:"run_id"`
	Reason   string   `json:"reason"`
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence"`
	// How says how it was found first; Order what the order rests on:
	// "evidence" (it alone failed of its own, or so first by evidence),
	// "clock" (ranks of one node by that node's clock), "clocks" (ranks of
	// several nodes by their clocks, which may disagree).
	How   string `json:"how"`
	Order string `json:"order"`
}

// Group is a job's story across its nodes.
type Group struct {
	Group string `json:"group"`
	// Reason is the job's reason: the root cause's, else "running" while a
	// rank runs, success when every rank exited 0, else peer_failed (every
	// rank recorded read a failure elsewhere).
	Reason    string      `json:"reason"`
	Summary   string      `json:"summary"`
	RootCause *GroupRoot  `json:"root_cause"`
	Ranks     []GroupRank `json:"ranks"`
	Nodes     []string    `json:"nodes"`
	// WorldSize is the job's size as its ranks say it (0: not said);
	// Missing the ranks below it with no record.
	WorldSize int   `json:"world_size"`
	Missing   []int `json:"missing_ranks"`
	// Notes say what the story cannot vouch for (clocks, missing ranks).
	Notes []string `json:"notes"`
}

// tier orders failures by evidence: a failure of its own first, then an
// end from outside or unexplained, then a rank that only read a failure
// elsewhere; ranks that did not fail last.
func tier(failure string) int {
	switch failure {
	case FailureOwn:
		return 0
	case FailureExternal, FailureUnknown:
		return 1
	case FailureConsequence:
		return 2
	}
	return 3
}

// JudgeGroup tells a job's story from the records of its ranks, whichever
// nodes wrote them: the rank that failed first across all nodes (by
// evidence first, then by time), and every other failed rank collateral.
// A rank recorded twice (a run started again in the same group) counts by
// its newest record. Nil when there are no members.
func JudgeGroup(group string, ms []Member) *Group {
	byRank := map[int]Member{}
	for _, m := range ms {
		if o, ok := byRank[m.Rank.Rank]; !ok || m.Written.After(o.Written) {
			byRank[m.Rank.Rank] = m
		}
	}
	if len(byRank) == 0 {
		return nil
	}
	keys := make([]int, 0, len(byRank))
	for k := range byRank {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	g := &Group{Group: group, Ranks: []GroupRank{}, Nodes: []string{}, Missing: []int{}, Notes: []string{}}
	nodes := map[string]bool{}
	running := 0
	for _, k := range keys {
		m := byRank[k]
		gr := GroupRank{Rank: m.Rank, RunID: m.RunID, RunName: m.RunName, Host: m.Host, StateDir: m.StateDir, Status: m.Status, OwnReason: m.Rank.Reason, Summary: m.Summary}
		gr.Failure, gr.FailedAt = m.Failure, m.FailedAt
		gr.Evidence = append([]string{}, m.Rank.Evidence...)
		if gr.Node == "" {
			gr.Node = m.Host
		}
		if !nodes[gr.Node] {
			nodes[gr.Node] = true
			g.Nodes = append(g.Nodes, gr.Node)
		}
		if m.Status == MemberRunning {
			running++
		}
		if ws := m.Rank.WorldSize; ws != nil && *ws > g.WorldSize {
			g.WorldSize = *ws
		}
		g.Ranks = append(g.Ranks, gr)
	}
	slices.Sort(g.Nodes)
	for r := 0; r < g.WorldSize; r++ {
		if _, ok := byRank[r]; !ok {
			g.Missing = append(g.Missing, r)
		}
	}
	if len(g.Missing) > 0 {
		g.Notes = append(g.Notes, fmt.Sprintf("%s %s of %d recorded nothing: its supervisor did not start, or its node's records are not in this directory",
			rankWord(len(g.Missing)), joinInts(g.Missing), g.WorldSize))
	}
	root := firstInGroup(g.Ranks)
	if root == nil {
		switch {
		case running > 0:
			g.Reason, g.Summary = MemberRunning, fmt.Sprintf("%s of %d still running", plural(running, "rank"), len(g.Ranks))
		case allOK(g.Ranks):
			g.Reason, g.Summary = "success", "every rank recorded exited 0"
		default:
			g.Reason = "peer_failed"
			g.Summary = "every rank recorded ended because another failed, and none recorded a failure of its own: the first failure is in a rank with no record"
		}
		return g
	}
	g.RootCause = root
	g.Reason = root.Reason
	g.Summary = fmt.Sprintf("rank %d on %s failed first: %s", root.Rank, root.Node, root.Summary)
	for i := range g.Ranks {
		r := &g.Ranks[i]
		if r.Rank.Rank == root.Rank {
			continue
		}
		if r.Failure == FailureOwn || r.Failure == FailureOK || r.Failure == "" {
			continue
		}
		why := fmt.Sprintf("rank %d on %s failed first", root.Rank, root.Node)
		if rt := rootTime(g.Ranks, root.Rank); !r.FailedAt.IsZero() && !rt.IsZero() {
			d := r.FailedAt.Sub(rt).Round(time.Millisecond)
			switch {
			case r.Node != root.Node && d >= 0:
				why += fmt.Sprintf(" (this rank ended %s later, by the clocks of %s and %s)", d, root.Node, r.Node)
			case r.Node != root.Node:
				why += fmt.Sprintf(" (by the clocks of %s and %s this rank ended %s earlier: the clocks disagree, and what each rank recorded of its own end decides)", root.Node, r.Node, -d)
			case d >= 0:
				why += fmt.Sprintf(" (this rank ended %s later)", d)
			}
		}
		if r.OwnReason != "" && r.OwnReason != "peer_failed" {
			why += "; this rank: " + diedOf(r)
		}
		r.Evidence = append([]string{why}, r.Evidence...)
	}
	if len(g.Ranks) > 0 && root.Order == "clocks" {
		g.Notes = append(g.Notes, "the first failure is told from the others by the clocks of different nodes, which may disagree: "+root.How)
	}
	return g
}

// firstInGroup is the group's root cause: of the failed ranks, those of
// the strongest evidence, then the earliest.
func firstInGroup(rs []GroupRank) *GroupRoot {
	var cands []*GroupRank
	best := 3
	for i := range rs {
		t := tier(rs[i].Failure)
		switch {
		case t < best:
			best, cands = t, []*GroupRank{&rs[i]}
		case t == best && t < 3:
			cands = append(cands, &rs[i])
		}
	}
	if best >= 2 {
		// only ranks that read a failure elsewhere: the first is in no record
		return nil
	}
	slices.SortStableFunc(cands, func(a, b *GroupRank) int {
		switch {
		case a.FailedAt.IsZero() && !b.FailedAt.IsZero():
			return 1
		case !a.FailedAt.IsZero() && b.FailedAt.IsZero():
			return -1
		}
		if c := a.FailedAt.Compare(b.FailedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.Rank.Rank, b.Rank.Rank)
	})
	r := cands[0]
	root := &GroupRoot{Rank: r.Rank.Rank, Node: r.Node, PID: r.PID, RunID: r.RunID, Reason: r.OwnReason, Evidence: append([]string{}, r.Evidence...)}
	root.Summary = summaryOf(r)
	what := "failed of its own"
	if best == 1 {
		what = "ended from outside or unexplained"
	}
	var others []string
	otherNode := false
	for _, c := range cands[1:] {
		others = append(others, fmt.Sprintf("rank %d on %s", c.Rank.Rank, c.Node))
		if c.Node != r.Node {
			otherNode = true
		}
	}
	name := fmt.Sprintf("rank %d on %s", r.Rank.Rank, r.Node)
	switch {
	case len(others) == 0:
		root.Order = "evidence"
		root.How = fmt.Sprintf("%s is the only rank that %s", name, what)
		var peers []string
		for _, o := range rs {
			if o.Failure == FailureConsequence || (best == 0 && tier(o.Failure) == 1) {
				peers = append(peers, strconv.Itoa(o.Rank.Rank))
			}
		}
		if len(peers) > 0 {
			root.How += fmt.Sprintf("; %s %s only saw a peer go or ended after it", rankWord(len(peers)), strings.Join(peers, ", "))
		}
	case otherNode:
		root.Order = "clocks"
		root.How = fmt.Sprintf("%s %s first by the clock of %s; %s also %s, later by the clocks of their nodes", name, what, r.Node, strings.Join(others, ", "), what)
	default:
		root.Order = "clock"
		root.How = fmt.Sprintf("%s %s first by the clock of %s; %s also %s, later", name, what, r.Node, strings.Join(others, ", "), what)
	}
	return root
}

func rootTime(rs []GroupRank, rank int) time.Time {
	for _, r := range rs {
		if r.Rank.Rank == rank {
			return r.FailedAt
		}
	}
	return time.Time{}
}

// diedOf says what a collateral rank ended of, from its own record.
func diedOf(r *GroupRank) string {
	if r.OwnReason != "" && r.OwnReason != "peer_failed" {
		s := r.OwnReason
		if r.Signal != nil {
			s += " (" + *r.Signal + ")"
		}
		return s
	}
	if len(r.Evidence) > 0 {
		return r.Evidence[0]
	}
	if r.Signal != nil {
		return "ended by " + *r.Signal
	}
	if r.ExitCode != nil {
		return fmt.Sprintf("exited with status %d", *r.ExitCode)
	}
	return "it ended"
}

func summaryOf(r *GroupRank) string {
	if r.Summary != "" {
		return r.Summary
	}
	s := r.OwnReason
	if r.Signal != nil {
		s += ", ended by " + *r.Signal
	} else if r.ExitCode != nil {
		s += fmt.Sprintf(", exit status %d", *r.ExitCode)
	}
	return s
}

func allOK(rs []GroupRank) bool {
	for _, r := range rs {
		if r.Failure != FailureOK {
			return false
		}
	}
	return true
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
