package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/vramguard/vramguard/internal/units"
	"github.com/vramguard/vramguard/internal/usage"
)

// runGroupReport is report --group: each node's agent's report of the
// job, joined.
func runGroupReport(ctx context.Context, f *Factory, o *reportOptions) error {
	if o.JSON && o.CSV {
		return Usagef("--json and --csv cannot be used together")
	}
	if o.CSV {
		return Usagef("--group: the report is a table or --json")
	}
	path, sock, err := reportQuery(f, o, "group="+url.QueryEscape(o.Group))
	if err != nil {
		return err
	}
	agents := o.URLs
	if sock != "" {
		agents = []string{""} // the one agent at the socket
	}
	var reps []usage.GroupReport
	for _, raw := range agents {
		var rep usage.GroupReport
		if err := askAgent(ctx, sock, raw, path, " on each node", &rep); err != nil {
			return err
		}
		reps = append(reps, rep)
	}
	rep := usage.MergeGroup(reps)
	if o.JSON {
		return f.WriteJSON(rep)
	}
	writeGroupReport(f.IO.Out, rep)
	return nil
}

// writeGroupReport writes a job's efficiency: a line per node, its ranks
// beneath.
func writeGroupReport(w io.Writer, rep usage.GroupReport) {
	fmt.Fprintf(w, "job %s, %s to %s\n\n", rep.Group, rep.From.Local().Format("2006-01-02 15:04"), rep.To.Local().Format("2006-01-02 15:04"))
	if len(rep.Ranks) == 0 {
		fmt.Fprintf(w, "no rank of job %s in the agents' history for this range\n", rep.Group)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRANK\tGPU PEAK\tOF GPU TOTAL\tBUSY h\tIDLE h\tHOST PEAK\tASKED\tOF ASKED\t")
	for _, n := range rep.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\t%.2f\t%.2f\t%s\t%s\t%s\t\n", n.Node, joinRanks(n.Ranks), units.FormatBytes(uint64(n.GPUPeakBytes)),
			n.BusyHours, n.IdleHours, units.FormatBytes(uint64(n.HostPeakBytes)), bytesOr(n.HostRequestBytes), percentOf(n.HostPeakBytes, n.HostRequestBytes))
		for _, r := range rep.Ranks {
			if r.Node != n.Node {
				continue
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%.2f\t%.2f\t%s\t\t\t\n", joinRanks(r.Ranks), units.FormatBytes(uint64(r.GPUPeakBytes)),
				ofTotal(r.GPUPeakBytes, r.GPUTotalBytes), r.BusyHours, r.IdleHours, units.FormatBytes(uint64(r.HostPeakBytes)))
		}
	}
	tw.Flush()
}

func joinRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

func bytesOr(b int64) string {
	if b <= 0 {
		return "-"
	}
	return units.FormatBytes(uint64(b))
}

func percentOf(v, total int64) string {
	if total <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(v)/float64(total))
}

func ofTotal(v, total int64) string {
	if total <= 0 {
		return "-"
	}
	return percentOf(v, total) + " of " + units.FormatBytes(uint64(total))
}
