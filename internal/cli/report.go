package cli

import (
	"context"
	"encoding/csv"
	"fmt"
	"github.com/vramguard/vramguard/internal/termsafe"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/units"
	"github.com/vramguard/vramguard/internal/usage"
)

type reportOptions struct {
	By    string
	Since string
	JSON  bool
	CSV   bool
	Agent string
	URL   string
	// Group and URLs are --group's: the distributed job, and each node's
	// agent (--url, once per node).
	Group string
	URLs  []string
}

// NewCmdReport builds `vramguard report`.
func NewCmdReport(f *Factory) *cobra.Command {
	o := &reportOptions{}
	cmd := &cobra.Command{
		Use:   "report",
		Short: "GPU accounting from the agent's history: memory-hours, busy and idle hours, peaks, deaths per user, job or GPU",
		Long: `report asks the machine-wide agent (vramguard serve) for the accounting of a
range of its history, grouped by user, job or GPU:

  MEM GiB·h   GPU memory held over time (GiB × hours)
  HELD h      hours some GPU memory was held
  BUSY h      the part of it at or above the idle threshold's utilisation
              (serve --idle-threshold, 1% by default)
  IDLE h      the part under it (time without a utilisation reading from the
              driver is in neither)
  PEAK        the most GPU memory one job held
  DIED        jobs that died in the range, and why

The figures are sums over the agent's stored samples, so retention applies:
within --keep-fine every sample counts; older stretches count by their
per-step peaks (--coarse-step), an upper bound.

--by gpu gives one row per GPU index: the memory held on that GPU, the
hours each job held memory there (busy or idle by the utilisation the
driver attributes to its processes on that GPU), the most one job held
there, and the deaths of jobs that held memory on it. A job on GPUs 0 and 1
counts in both rows, with its memory on each; the total's hours are then
GPU-hours (the rows' sum), its jobs and deaths each job's once. A MIG
instance counts for its GPU. Samples stored before the agent kept per-GPU
readings are split evenly over the GPUs the job held memory on. Jobs that
held no GPU memory are under "-".

It asks the shared agent's socket (serve --shared) when one runs: there a
user's report covers their own jobs; root and --admin-group members see
everyone's. Otherwise it asks --url.

--group GROUP reports one distributed job (the Slurm job id, run --group's
name) as seff and jobstats do, with the GPU memory they leave out: per node
and per rank, the GPU memory peak against the total of the GPUs it used,
busy and idle GPU hours, and the host memory peak against what the job asked
Slurm for (SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU times the node's CPUs).
Each node's agent knows its own ranks: give --url once per node's agent (or
ask each node's shared socket).`,
		Example: `  vramguard report
  vramguard report --by job --since 24h
  vramguard report --by user --since 30d --csv > gpu-usage.csv
  vramguard report --json | jq '.rows[] | {group, idle_hours}'
  vramguard report --group "$SLURM_JOB_ID" --url http://n1:9345 --url http://n2:9345`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReport(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.By, "by", usage.ByUser, "group by user, job or gpu")
	fl.StringVar(&o.Since, "since", "7d", "how far back: a duration such as 24h, 90m or 7d")
	fl.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	fl.BoolVar(&o.CSV, "csv", false, "print the report as CSV")
	fl.StringVar(&o.Agent, "agent", "auto", "the shared agent's API socket: auto (under /run/vramguard when one runs), none, or a path")
	fl.StringArrayVar(&o.URLs, "url", []string{"http://127.0.0.1:9345"}, "the agent's HTTP address, when no shared socket is used; with --group, once per node's agent")
	fl.StringVar(&o.Group, "group", "", "report one distributed job's efficiency per node and rank: GROUP is its Slurm job id or run --group's name")
	return cmd
}

// parseSince reads a duration, with "d" for days.
func parseSince(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.ParseFloat(n, 64)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%q: want a positive number of days", s)
		}
		return time.Duration(d * 24 * float64(time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 24h or 7d", s)
	}
	return d, nil
}

// reportQuery is what both reports ask the agent: the report's path, of
// query (by=… or group=…) over the --since range, and the agent's socket
// ("": none, ask --url).
func reportQuery(f *Factory, o *reportOptions, query string) (path, sock string, err error) {
	since, err := parseSince(o.Since)
	if err != nil {
		return "", "", Usagef("--since %v", err)
	}
	if sock, err = agentSocket(o.Agent, f.Getenv); err != nil {
		return "", "", err
	}
	return "/api/v1/report?" + query + "&range=" + url.QueryEscape(since.String()), sock, nil
}

// askAgent reads the agent's answer to path into out: over the socket sock,
// or where sock is "" from the agent at the --url raw. where says which
// agents report reads (" on each node"), for the error when none answers.
func askAgent(ctx context.Context, sock, raw, path, where string, out any) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if sock != "" {
		if err := getAgent(ctx, agentClient(sock, 30*time.Second), path, out); err != nil {
			return Envf("the agent at %s: %v", sock, err)
		}
		return nil
	}
	at, err := agentURL(raw, path)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 30 * time.Second}
	if err := getAgentURL(ctx, c, at, out); err != nil {
		return Envf("no agent answered at %s (%v): report reads the history of vramguard serve%s; start it, or give --url", raw, err, where)
	}
	return nil
}

// agentURL is path at the agent --url names (raw: http or https, a host,
// perhaps a port), or a usage error naming raw.
func agentURL(raw, path string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", Usagef("--url %q: want http://HOST:PORT", raw)
	}
	return strings.TrimSuffix(raw, "/") + path, nil
}

func runReport(ctx context.Context, f *Factory, o *reportOptions) error {
	if o.Group != "" {
		return runGroupReport(ctx, f, o)
	}
	if len(o.URLs) > 1 {
		return Usagef("--url: one agent, unless --group asks each node's")
	}
	if len(o.URLs) == 1 {
		o.URL = o.URLs[0]
	}
	if !slices.Contains(usage.Bys, o.By) {
		return Usagef("--by %q: want user, job or gpu", o.By)
	}
	if o.JSON && o.CSV {
		return Usagef("--json and --csv cannot be used together")
	}
	path, sock, err := reportQuery(f, o, "by="+url.QueryEscape(o.By))
	if err != nil {
		return err
	}
	var rep usage.Report
	if err := askAgent(ctx, sock, o.URL, path, "", &rep); err != nil {
		return err
	}
	switch {
	case o.JSON:
		return f.WriteJSON(rep)
	case o.CSV:
		return writeReportCSV(f.IO.Out, rep)
	}
	writeReport(f.IO.Out, rep)
	return nil
}

// reportFigures are a row's figures as the table and the CSV write them.
func reportFigures(r usage.Row) []string {
	return []string{strconv.Itoa(r.Jobs), fmt.Sprintf("%.2f", r.MemoryGiBHours), fmt.Sprintf("%.2f", r.HeldHours),
		fmt.Sprintf("%.2f", r.BusyHours), fmt.Sprintf("%.2f", r.IdleHours)}
}

func writeReport(w io.Writer, rep usage.Report) {
	fmt.Fprintf(w, "GPU use by %s, %s to %s\n\n", rep.By, rep.From.Local().Format("2006-01-02 15:04"), rep.To.Local().Format("2006-01-02 15:04"))
	if len(rep.Rows) == 0 {
		fmt.Fprintln(w, "no jobs in the agent's history for this range")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.ToUpper(rep.By)+"\tJOBS\tMEM GiB·h\tHELD h\tBUSY h\tIDLE h\tPEAK\tDIED\t")
	for _, r := range append(slices.Clone(rep.Rows), rep.Total) {
		fmt.Fprintln(tw, termsafe.Line(r.Group)+"\t"+strings.Join(reportFigures(r), "\t")+"\t"+units.FormatBytes(uint64(r.PeakBytes))+"\t"+strconv.Itoa(r.Died)+"\t")
	}
	tw.Flush()
	var why []string
	for _, r := range rep.Rows {
		g := r.Group
		if rep.By == usage.ByGPU && g != usage.NoGPU {
			g = "GPU " + g // a job on two GPUs is listed under both
		}
		for _, d := range r.DiedWhy {
			why = append(why, "  "+g+": "+d)
		}
	}
	if len(why) > 0 {
		fmt.Fprintln(w, "\ndeaths:")
		fmt.Fprintln(w, strings.Join(why, "\n"))
	}
}

func writeReportCSV(w io.Writer, rep usage.Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{rep.By, "jobs", "memory_gib_hours", "held_hours", "busy_hours", "idle_hours", "peak_bytes", "died", "died_why"})
	for _, r := range rep.Rows {
		_ = cw.Write(append(append([]string{r.Group}, reportFigures(r)...), strconv.FormatInt(r.PeakBytes, 10), strconv.Itoa(r.Died), strings.Join(r.DiedWhy, "; ")))
	}
	cw.Flush()
	return cw.Error()
}

// getAgentURL is getAgent over TCP.
func getAgentURL(ctx context.Context, c *http.Client, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	return doAgent(c, req, out)
}
