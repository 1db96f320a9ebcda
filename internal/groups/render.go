package groups

import (
	"fmt"
	"io"
	"strings"

	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/ranks"
)

// Render writes a group's story as `vramguard explain --group` prints it:
// the job's reason, the rank that failed first with its own evidence and
// what the order rests on, one line per rank, each other failed rank's
// evidence, and where each rank's own post-mortem is.
func Render(w io.Writer, g *ranks.Group) {
	fmt.Fprintf(w, "group %s: %s\n", g.Group, g.Reason)
	if g.Summary != "" {
		fmt.Fprintf(w, "  %s\n", g.Summary)
	}
	fmt.Fprintf(w, "  %s on %s (%s)\n", plural(len(g.Ranks), "rank"), plural(len(g.Nodes), "node"), strings.Join(g.Nodes, ", "))
	if r := g.RootCause; r != nil {
		fmt.Fprintf(w, "\nfirst failure: rank %d on %s (pid %d, run %s): %s\n", r.Rank, r.Node, r.PID, r.RunID, r.Reason)
		fmt.Fprintf(w, "  %s (the order rests on %s)\n", r.How, orderWords(r.Order))
		for _, e := range r.Evidence {
			fmt.Fprintf(w, "  • %s\n", strings.ReplaceAll(e, "\n", "\n    "))
		}
	}
	fmt.Fprintf(w, "\nranks\n")
	fmt.Fprintf(w, "  %-5s %-10s %-8s %-15s %-16s %6s %10s %10s  %s\n", "RANK", "NODE", "PID", "EXIT", "REASON", "STEPS", "PEAK HOST", "PEAK GPU", "LAST LINE")
	for _, r := range g.Ranks {
		rank := fmt.Sprint(r.Rank.Rank)
		if g.RootCause != nil && g.RootCause.Rank == r.Rank.Rank {
			rank += "*"
		}
		c := postmortem.CellsOf(r.Rank)
		if r.Status == ranks.MemberRunning {
			c.Reason = ranks.MemberRunning
		}
		fmt.Fprintf(w, "  %-5s %-10s %-8s %-15s %-16s %6s %10s %10s  %s\n", rank, c.Node, c.PID, c.Exit, c.Reason, c.Steps, c.PeakHost, c.PeakGPU, c.LastLine)
	}
	for _, r := range g.Ranks {
		if !r.Collateral && (g.RootCause == nil || r.Rank.Rank == g.RootCause.Rank || r.Failure != ranks.FailureOwn) {
			continue
		}
		what := r.Reason
		if r.Collateral {
			what += ", collateral"
		}
		fmt.Fprintf(w, "  rank %d on %s (%s):\n", r.Rank.Rank, r.Node, what)
		for _, e := range r.Evidence {
			fmt.Fprintf(w, "    • %s\n", strings.ReplaceAll(e, "\n", "\n      "))
		}
	}
	if len(g.Notes) > 0 {
		fmt.Fprintf(w, "\nnotes\n")
		for _, n := range g.Notes {
			fmt.Fprintf(w, "  • %s\n", n)
		}
	}
	fmt.Fprintf(w, "\neach rank's own post-mortem, on its node\n")
	for _, r := range g.Ranks {
		fmt.Fprintf(w, "  rank %d: VRAMGUARD_HOME=%s vramguard explain %s\n", r.Rank.Rank, r.StateDir, r.RunID)
	}
}

func orderWords(order string) string {
	switch order {
	case "evidence":
		return "evidence: what each rank recorded of its own end"
	case "clock":
		return "one node's clock"
	case "clocks":
		return "the clocks of different nodes, which may disagree"
	}
	return order
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
