package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vramguard/vramguard/internal/groups"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/store"
)

// groupRows are runs' lines for one group: the job's line (its reason from
// the group's story across nodes when its records are here, its ranks and
// nodes counted), and with -v one line per rank beneath it. runs are the
// group's runs in this state directory, newest first.
func groupRows(f *Factory, group string, runs []*store.Run, row func(*store.Run) []string) [][]string {
	newest := runs[0]
	line := row(newest)
	story, _ := groups.Dir(f.GroupDir()).Story(group)
	nranks, nodes := len(runs), 1
	status := line[2]
	if story != nil {
		nranks, nodes = len(story.Ranks), len(story.Nodes)
		status = story.Reason
		if story.RootCause != nil {
			status += fmt.Sprintf(" (rank %d on %s first)", story.RootCause.Rank, story.RootCause.Node)
		}
	} else {
		for _, r := range runs {
			if r.Status == store.StatusRunning {
				status = store.StatusRunning
				break
			}
		}
	}
	var peakRSS, peakGPU uint64
	start := newest.StartedAt
	for _, r := range runs {
		peakRSS, peakGPU = max(peakRSS, r.PeakRSS), max(peakGPU, r.PeakGPU)
		if r.StartedAt.Before(start) {
			start = r.StartedAt
		}
	}
	line[0] = "group " + group
	line[2] = status
	line[3] = ago(f.Now(), start)
	line[5] = fmt.Sprintf("[%s on %s] %s", plural(nranks, "rank"), plural(nodes, "node"), line[5])
	out := [][]string{line}
	if !f.Verbose {
		return out
	}
	if story != nil {
		for _, r := range story.Ranks {
			out = append(out, []string{"  " + dash(r.RunID), fmt.Sprintf("rank %d on %s", r.Rank.Rank, dash(r.Node)), rankStatus(r), "", "", "", "", "", ""})
		}
		return out
	}
	rs := slices.Clone(runs)
	slices.Reverse(rs)
	for _, r := range rs {
		l := row(r)
		l[0], l[1] = "  "+l[0], "run of "+group
		out = append(out, l)
	}
	return out
}

func rankStatus(r ranks.GroupRank) string {
	if r.Status == ranks.MemberRunning {
		return ranks.MemberRunning
	}
	s := dash(r.Reason)
	if r.Collateral && r.OwnReason != "" && r.OwnReason != r.Reason {
		s += " (" + r.OwnReason + ")"
	}
	return s
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, strings.TrimSuffix(thing, "s"))
}
