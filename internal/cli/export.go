package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/analyze/runtrace"
	"github.com/vramguard/vramguard/internal/store"
)

// recorded is one attempt of a recorded run with its samples and events.
type recorded struct {
	Run     *store.Run
	Attempt *store.Attempt
	Samples []store.Sample // of this attempt, oldest first
	Events  []*store.Event // of this attempt
}

// loadAttempt reads attempt n of r (0: the last one) from st. A run with no
// attempt yet is a failure (exit 1); an attempt it does not have is a usage
// error.
func loadAttempt(ctx context.Context, st *store.Store, r *store.Run, n int) (*recorded, error) {
	attempts, err := st.Attempts(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("read attempts of %s: %w", r.ID, err)
	}
	if len(attempts) == 0 {
		return nil, Failf("run %s has no attempts yet", r.ID)
	}
	a := attempts[len(attempts)-1]
	if n != 0 {
		a = nil
		for _, x := range attempts {
			if x.N == n {
				a = x
			}
		}
		if a == nil {
			return nil, Usagef("run %s has no attempt %d (it has %d)", r.ID, n, len(attempts))
		}
	}
	all, err := st.Samples(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("read samples of %s: %w", r.ID, err)
	}
	evs, err := st.Events(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", r.ID, err)
	}
	rec := &recorded{Run: r, Attempt: a, Samples: runtrace.Attempt(all, a.N), Events: []*store.Event{}}
	for _, e := range evs {
		if e.Attempt == a.N {
			rec.Events = append(rec.Events, e)
		}
	}
	return rec, nil
}

type exportOptions struct {
	Attempt int
	Format  string
	Output  string
}

// newCmdRunsExport builds `vramguard runs export`.
func newCmdRunsExport(f *Factory) *cobra.Command {
	opts := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export RUN [--attempt N] [--format csv|json] [-o FILE]",
		Short: "Write a run's recorded memory timeline as a trace CSV or as JSON",
		Long: `Write the memory timeline of one attempt of a recorded run (RUN: id, id prefix,
name or "last"; default the last attempt).

--format csv (the default) writes a trace CSV in the format of shared/traces: the
header t,allocated,reserved,used,total, then the host and probe columns
rss,pss,limit,cgroup_usage,step,inactive_split,alloc_retries. t is seconds from the
attempt's start, every figure is in bytes (step and alloc_retries are counts), and a
figure that was not measured is an empty cell. ` + "`vramguard analyze FILE.csv`" + ` reads it
back and concludes what ` + "`vramguard analyze RUN`" + ` does (docs/ANALYSIS.md).

--format json writes one object: the run, the attempt, its samples (as the store
keeps them, each with t_s, seconds from the attempt's start) and its events.`,
		Example: `  vramguard runs export last -o last.csv
  vramguard analyze last.csv
  vramguard runs export bert --attempt 1 --format json | jq '.samples[-1]'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return Usagef("want one RUN, got %d arguments\nRun 'vramguard runs export --help' for usage.", len(args))
			}
			if opts.Format != "csv" && opts.Format != "json" {
				return Usagef("--format %q: want csv or json", opts.Format)
			}
			if opts.Attempt < 0 {
				return Usagef("--attempt %d: want an attempt number (1, 2, ...)", opts.Attempt)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runsExport(cmd.Context(), f, args[0], opts)
		},
	}
	cmd.Flags().IntVar(&opts.Attempt, "attempt", 0, "export attempt N (default: the last)")
	cmd.Flags().StringVar(&opts.Format, "format", "csv", "csv (a trace CSV) or json")
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "", "write to this file instead of standard output")
	return cmd
}

func runsExport(ctx context.Context, f *Factory, ref string, opts *exportOptions) error {
	st, r, err := f.openRun(ctx, ref)
	if err != nil {
		return err
	}
	defer st.Close()
	rec, err := loadAttempt(ctx, st, r, opts.Attempt)
	if err != nil {
		return err
	}
	write := func(w io.Writer) error {
		if opts.Format == "json" {
			return writeExportJSON(w, rec)
		}
		return runtrace.WriteCSV(w, rec.Samples, rec.Attempt.StartedAt)
	}
	if opts.Output == "" || opts.Output == "-" {
		err = write(f.IO.Out)
	} else {
		err = writeFileAtomic(opts.Output, write)
	}
	if err != nil {
		return Failf("export run %s attempt %d: %v", r.ID, rec.Attempt.N, err)
	}
	if len(rec.Samples) == 0 {
		fmt.Fprintf(f.IO.ErrOut, "note: run %s attempt %d has no memory samples\n", r.ID, rec.Attempt.N)
	}
	return nil
}

// writeFileAtomic writes path through write, via a temporary file beside it,
// so a failed export leaves no half-written file.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// exportSample is a stored sample with its time from the attempt's start.
type exportSample struct {
	TS float64 `json:"t_s"`
	*store.Sample
}

// exportDoc is `runs export --format json`.
type exportDoc struct {
	RunID     string          `json:"run_id"`
	Name      string          `json:"name"`
	Command   []string        `json:"command"`
	Attempt   int             `json:"attempt"`
	Attempts  int             `json:"attempts"`
	StartedAt time.Time       `json:"started_at"`
	EndedAt   *time.Time      `json:"ended_at"`
	Reason    string          `json:"reason"`
	ExitCode  *int            `json:"exit_code"`
	Samples   []exportSample  `json:"samples"`
	Events    []*store.Event  `json:"events"`
	Verdict   json.RawMessage `json:"verdict,omitempty"`
}

func writeExportJSON(w io.Writer, rec *recorded) error {
	a := rec.Attempt
	doc := exportDoc{RunID: rec.Run.ID, Name: rec.Run.Name, Command: rec.Run.Command, Attempt: a.N, Attempts: rec.Run.Attempts,
		StartedAt: a.StartedAt, EndedAt: a.EndedAt, Reason: a.Reason, ExitCode: a.ExitCode,
		Samples: make([]exportSample, len(rec.Samples)), Events: rec.Events, Verdict: a.Verdict}
	for i := range rec.Samples {
		s := &rec.Samples[i]
		doc.Samples[i] = exportSample{TS: s.T.Sub(a.StartedAt).Seconds(), Sample: s}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
}
