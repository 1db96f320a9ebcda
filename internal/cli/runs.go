package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/units"
)

// NewCmdRuns builds `vramguard runs`.
func NewCmdRuns(f *Factory) *cobra.Command {
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List supervised runs, newest first",
		Example: `  vramguard runs
  vramguard runs --limit 5 --json | jq '.[] | select(.reason=="cuda_oom") | .id'
  vramguard runs export last -o last.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, err := f.openStoreRead(ctx)
			if errors.Is(err, store.ErrNoStore) {
				// Nothing recorded, and a read creates nothing.
				if asJSON {
					return f.WriteJSON([]runJSON{})
				}
				return printRuns(f, nil)
			}
			if err != nil {
				return err
			}
			defer st.Close()
			runs, err := st.Runs(ctx, limit)
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]runJSON, 0, len(runs))
				for _, r := range runs {
					out = append(out, toRunJSON(r, f.Now()))
				}
				return f.WriteJSON(out)
			}
			return printRuns(f, runs)
		},
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "show at most N runs (0 for all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(newCmdRunsExport(f))
	return cmd
}

type runJSON struct {
	*store.Run
	DurationS float64 `json:"duration_s"`
}

func toRunJSON(r *store.Run, now time.Time) runJSON {
	return runJSON{Run: r, DurationS: runDuration(r, now).Seconds()}
}

func runDuration(r *store.Run, now time.Time) time.Duration {
	end := now
	if r.EndedAt != nil {
		end = *r.EndedAt
	}
	return end.Sub(r.StartedAt)
}

func printRuns(f *Factory, runs []*store.Run) error {
	if len(runs) == 0 {
		fmt.Fprintln(f.IO.ErrOut, "no runs yet: start one with `vramguard run -- COMMAND`")
		return nil
	}
	tw := tabwriter.NewWriter(f.IO.Out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tREASON\tSTARTED\tDURATION\tATTEMPTS\tPEAK RSS\tPEAK GPU\tCOMMAND")
	for _, r := range runs {
		gpu := "-"
		if r.PeakGPU > 0 {
			gpu = units.FormatBytes(r.PeakGPU)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, dash(r.Name), r.Status, dash(r.Reason),
			r.StartedAt.Local().Format("2006-01-02 15:04:05"), runDuration(r, f.Now()).Round(time.Second),
			r.Attempts, units.FormatBytes(r.PeakRSS), gpu, shorten(strings.Join(strings.Fields(strings.Join(r.Command, " ")), " "), 48))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
