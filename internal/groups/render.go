package groups

import (
	"fmt"
	"io"
	"strings"

	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/units"
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
		pid := "-"
		if r.PID > 0 {
			pid = fmt.Sprint(r.PID)
		}
		exit := "-"
		if r.ExitCode != nil {
			exit = fmt.Sprint(*r.ExitCode)
			if r.Signal != nil {
				exit += " (" + *r.Signal + ")"
			}
		}
		reason := r.Reason
		if r.Status == ranks.MemberRunning {
			reason = ranks.MemberRunning
		}
		if reason == "" {
			reason = "-"
		}
		steps := "-"
		if r.OptimizerSteps != nil {
			steps = fmt.Sprint(*r.OptimizerSteps)
		}
		last := r.LastLine
		if n := 72; len([]rune(last)) > n {
			last = string([]rune(last)[:n-1]) + "…"
		}
		fmt.Fprintf(w, "  %-5s %-10s %-8s %-15s %-16s %6s %10s %10s  %s\n", rank, cut(r.Node, 10), pid, exit, reason, steps,
			bytesOrDash(r.PeakHostBytes), bytesOrDash(r.PeakGPUBytes), last)
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

func bytesOrDash(v *uint64) string {
	if v == nil {
		return "-"
	}
	return units.FormatBytes(*v)
}

func cut(s string, n int) string {
	if s == "" {
		return "-"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
