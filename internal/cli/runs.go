package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/agent"
	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/termsafe"
	"github.com/vramguard/vramguard/internal/units"
)

// NewCmdRuns builds `vramguard runs`.
func NewCmdRuns(f *Factory) *cobra.Command {
	var limit int
	var asJSON, allUsers bool
	var agentSpec string
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List supervised runs, newest first",
		Long: `List supervised runs, newest first: id, name, status, when each started, the
command, peak GPU memory, duration, peak host RSS and attempts.

STATUS is running, lost, or how the run ended (a reason of docs/FAILURES.md);
"after REASON" follows it when an earlier attempt died and the run was restarted
(success after cuda_oom; after 3 deaths when they were of several kinds):
explain shows every attempt.

The table fits the terminal: with too little room, columns are dropped in this
order: ATTEMPTS, PEAK RSS, DURATION, COMMAND, PEAK GPU, STARTED, NAME; COMMAND
and NAME are cut short (…) first. ID and STATUS always show. Piped, or with
$COLUMNS set wide, every column shows whole; --json gives every field.

Runs are read from your own state directory. On a shared machine (serve --shared
running), --all-users lists every user's live runs through the agent instead:
yours with their id and name, another user's with owner, process and memory only.`,
		Example: `  vramguard runs
  vramguard runs --limit 5 --json | jq '.[] | select(.reason=="cuda_oom") | .id'
  vramguard runs --json | jq '.[] | select(.earlier_deaths | length > 0) | .id'
  vramguard runs export last -o last.csv
  vramguard runs --all-users`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if allUsers {
				return machineRuns(ctx, f, agentSpec, asJSON)
			}
			st, err := f.openStoreRead(ctx)
			if errors.Is(err, store.ErrNoStore) {
				// Nothing recorded, and a read creates nothing.
				if asJSON {
					return f.WriteJSON([]runJSON{})
				}
				return printRuns(f, nil, nil)
			}
			if err != nil {
				return err
			}
			defer st.Close()
			runs, err := st.Runs(ctx, limit)
			if err != nil {
				return err
			}
			ids := make([]string, len(runs))
			for i, r := range runs {
				ids[i] = r.ID
			}
			reasons, err := st.AttemptReasons(ctx, ids)
			if err != nil {
				return err
			}
			deaths := make(map[string][]string, len(runs))
			for _, r := range runs {
				deaths[r.ID] = earlierDeaths(reasons[r.ID])
			}
			if asJSON {
				out := make([]runJSON, 0, len(runs))
				for _, r := range runs {
					out = append(out, toRunJSON(r, f.Now(), deaths[r.ID]))
				}
				return f.WriteJSON(out)
			}
			return printRuns(f, runs, deaths)
		},
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "show at most N runs (0 for all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&allUsers, "all-users", false, "every user's live runs, through a machine-wide agent (serve --shared): another user's with owner, process and memory only")
	cmd.Flags().StringVar(&agentSpec, "agent", "auto", "with --all-users, the agent to ask: auto (its socket under "+probe.SharedDirDefault+"), or its API socket")
	cmd.AddCommand(newCmdRunsExport(f))
	return cmd
}

type runJSON struct {
	*store.Run
	DurationS float64 `json:"duration_s"`
	// EarlierDeaths are the reasons of the attempts before the last that
	// died (each followed by a restart), in order.
	EarlierDeaths []string `json:"earlier_deaths"`
}

func toRunJSON(r *store.Run, now time.Time, deaths []string) runJSON {
	deaths = emptyIfNil(deaths)
	return runJSON{Run: r, DurationS: runDuration(r, now).Seconds(), EarlierDeaths: deaths}
}

func runDuration(r *store.Run, now time.Time) time.Duration {
	end := now
	if r.EndedAt != nil {
		end = *r.EndedAt
	}
	return end.Sub(r.StartedAt)
}

// earlierDeaths are the reasons of the attempts before the last one that
// died (not those ended on purpose: a restart asked for, an interrupt).
func earlierDeaths(reasons []string) []string {
	var out []string
	for i, r := range reasons {
		if i < len(reasons)-1 && isDeath(r) {
			out = append(out, r)
		}
	}
	return out
}

// runStatus is the STATUS cell: running, lost, or the reason the run
// ended, then the deaths of earlier attempts ("success after cuda_oom").
func runStatus(r *store.Run, deaths []string) string {
	s := r.Status
	if r.Status == store.StatusFinished {
		s = dash(r.Reason)
	}
	if len(deaths) == 0 {
		return s
	}
	var kinds []string
	count := map[string]int{}
	for _, d := range deaths {
		if count[d] == 0 {
			kinds = append(kinds, d)
		}
		count[d]++
	}
	if len(kinds) > 2 {
		return fmt.Sprintf("%s after %d deaths", s, len(deaths))
	}
	for i, k := range kinds {
		if count[k] > 1 {
			kinds[i] = fmt.Sprintf("%s ×%d", k, count[k])
		}
	}
	return s + " after " + strings.Join(kinds, ", ")
}

// ago says how long before now t was: "42s ago", "5m ago", "3h ago",
// "6d ago", or past a week the day ("Nov 20", with the year when it is
// not this one).
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	case d < 7*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
	if t.Local().Year() == now.Local().Year() {
		return t.Local().Format("Jan 2")
	}
	return t.Local().Format("2006-01-02")
}

// compactDuration writes d in at most two units: 42s, 3m05s, 1h02m, 2d03h.
func compactDuration(d time.Duration) string {
	s := int64(d.Round(time.Second).Seconds())
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// runsColumns are the columns of `vramguard runs`; Keep is the order in
// which they give way on a narrow terminal (see the command's help).
var runsColumns = []column{
	{Header: "ID", Keep: 1, Always: true},
	{Header: "NAME", Keep: 3, Min: 10, Max: 24},
	{Header: "STATUS", Keep: 2, Always: true},
	{Header: "STARTED", Keep: 4},
	{Header: "PEAK GPU", Keep: 5, Right: true},
	{Header: "COMMAND", Keep: 6, Min: 10},
	{Header: "DURATION", Keep: 7, Right: true},
	{Header: "PEAK RSS", Keep: 8, Right: true},
	{Header: "ATTEMPTS", Keep: 9, Right: true},
}

func printRuns(f *Factory, runs []*store.Run, deaths map[string][]string) error {
	if len(runs) == 0 {
		fmt.Fprintln(f.IO.ErrOut, "no runs yet: start one with `vramguard run -- COMMAND`")
		return nil
	}
	now := f.Now()
	rows := make([][]string, 0, len(runs))
	row := func(r *store.Run) []string {
		gpu := "-"
		if r.PeakGPU > 0 {
			gpu = units.FormatBytes(r.PeakGPU)
		}
		// In runsColumns' order.
		return []string{r.ID, dash(r.Name), runStatus(r, deaths[r.ID]), ago(now, r.StartedAt), gpu,
			strings.Join(strings.Fields(strings.Join(r.Command, " ")), " "),
			compactDuration(runDuration(r, now)), units.FormatBytes(r.PeakRSS), fmt.Sprint(r.Attempts)}
	}
	// the runs of one group (a job's tasks) are one job: one line, at its
	// newest run's place, its ranks beneath with -v
	byGroup := map[string][]*store.Run{}
	for _, r := range runs {
		if r.Group != "" {
			byGroup[r.Group] = append(byGroup[r.Group], r)
		}
	}
	done := map[string]bool{}
	for _, r := range runs {
		if r.Group == "" {
			rows = append(rows, row(r))
			continue
		}
		if done[r.Group] {
			continue
		}
		done[r.Group] = true
		rows = append(rows, groupRows(f, r.Group, byGroup[r.Group], row)...)
	}
	return renderTable(f.IO.Out, f.termWidth(), runsColumns, rows)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// machineRun is a live run as a machine-wide agent shows it to the caller.
type machineRun struct {
	User string `json:"user"`
	UID  int    `json:"uid"`
	// RunID and Name are the caller's own runs' only (root and the
	// agent's admin group: everyone's).
	RunID    string `json:"run_id,omitempty"`
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	GPUBytes uint64 `json:"gpu_bytes"`
	RSSBytes uint64 `json:"rss_bytes"`
}

// machineRuns lists every user's live runs through the machine-wide agent
// (runs --all-users).
func machineRuns(ctx context.Context, f *Factory, spec string, asJSON bool) error {
	if spec == "none" {
		return Usagef("--all-users asks the machine-wide agent: give --agent auto or its API socket, not none")
	}
	sock, err := agentSocket(spec, f.Getenv)
	if err != nil {
		return err
	}
	if sock == "" {
		return Envf("--all-users needs the machine-wide agent (serve --shared), and none listens at %s", probe.SharedAPISocket(f.Getenv))
	}
	var m agent.Machine
	if err := getAgent(ctx, agentClient(sock, 10*time.Second), "/api/v1/machine", &m); err != nil {
		return Envf("the agent at %s did not answer: %v", sock, err)
	}
	// the caller's own runs are named from their own state directory (the
	// agent knows another user's run by its id only)
	st, err := f.openStoreRead(ctx)
	if err != nil {
		st = nil
	} else {
		defer st.Close()
	}
	out := []machineRun{}
	for _, j := range m.Jobs {
		if j.Kind != attrib.KindRun {
			continue
		}
		r := machineRun{User: j.User, UID: j.UID, RunID: j.RunID, Name: j.Name, PID: j.RootPID, GPUBytes: j.GPUBytes, RSSBytes: j.RSSBytes}
		if st != nil && r.RunID != "" {
			if own, err := st.Resolve(ctx, r.RunID); err == nil && own.ID == r.RunID {
				r.Name = own.Name
			}
		}
		out = append(out, r)
	}
	if asJSON {
		return f.WriteJSON(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(f.IO.Out, "no live runs on this machine")
		return nil
	}
	tw := tabwriter.NewWriter(f.IO.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tID\tNAME\tPID\tGPU\tHOST RSS")
	for _, r := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", termsafe.String(r.User), dash(r.RunID), termsafe.String(r.Name), r.PID,
			units.FormatBytes(r.GPUBytes), units.FormatBytes(r.RSSBytes))
	}
	return tw.Flush()
}
