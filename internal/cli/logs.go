package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/joblog"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/units"
)

// NewCmdLogs builds `vramguard logs`.
func NewCmdLogs(f *Factory) *cobra.Command {
	var follow, timestamps, withNotes bool
	var attempt int
	var stream string
	cmd := &cobra.Command{
		Use:   "logs [-f] [--attempt N] [--stream stdout|stderr] [RUN]",
		Short: "Print a run's output exactly as the job wrote it",
		Long: `Print the output a run's job wrote, byte for byte: stdout and stderr in arrival
order, each line whole, or with --stream one of them alone, exactly as the job
wrote it. RUN is a run id (or a unique prefix), a --name, or "last", the
default (as for explain). By default the latest attempt; -f follows the run
live, from its first attempt (or attempt N) across restarts, until it ends.`,
		Example: `  vramguard logs                    # the last run
  vramguard logs -f bert
  vramguard logs --attempt 1 --timestamps 20261129-173857-ab12cd

  # only the job's stderr (tracebacks, warnings), live
  vramguard logs -f --stream stderr bert

  # the job's stdout alone, byte for byte, into a file
  vramguard logs --stream stdout last > out.txt`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			streams, err := logStreams(stream, cmd.Flags().Changed("stream"))
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("attempt") && attempt < 1 {
				return Usagef("--attempt %d: attempts are numbered from 1 (without --attempt: the latest)", attempt)
			}
			ctx := cmd.Context()
			st, r, err := f.openRun(ctx, runArg(args))
			if err != nil {
				return err
			}
			defer st.Close()
			opts := joblog.Options{Timestamps: timestamps, Streams: streams}
			if withNotes {
				opts.Streams += "v"
			}
			return showLogs(ctx, f, st, r, attempt, follow, opts)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until the run ends")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "show attempt N (default: the latest)")
	cmd.Flags().BoolVarP(&timestamps, "timestamps", "t", false, "prefix each line with the time it was written")
	cmd.Flags().BoolVar(&withNotes, "notes", false, "include vramguard's own notes")
	cmd.Flags().StringVar(&stream, "stream", "", "show one stream alone, byte for byte: stdout or stderr (default: both)")
	return cmd
}

// logStreams maps --stream to the log's streams to show (joblog.Options):
// both unless set, else one alone, which the log reproduces exactly.
func logStreams(stream string, set bool) (string, error) {
	switch {
	case !set:
		return "oe", nil
	case stream == "stdout":
		return "o", nil
	case stream == "stderr":
		return "e", nil
	}
	return "", Usagef("invalid --stream %q: use stdout or stderr (without --stream both are shown)", stream)
}

func showLogs(ctx context.Context, f *Factory, st *store.Store, r *store.Run, attempt int, follow bool, opts joblog.Options) error {
	attempts, err := st.Attempts(ctx, r.ID)
	if err != nil {
		return err
	}
	if len(attempts) == 0 && !follow {
		return Failf("run %s has no attempts yet", r.ID)
	}
	if attempt > len(attempts) && (!follow || r.Status != store.StatusRunning) {
		return Usagef("run %s has %s: there is no attempt %d", r.ID, units.Plural(len(attempts), "attempt"), attempt)
	}
	if !follow {
		a := attempts[len(attempts)-1]
		if attempt > 0 {
			a = attempts[attempt-1]
		}
		fh, err := os.Open(a.LogPath)
		if err != nil {
			return Failf("open log: %v", err)
		}
		defer fh.Close()
		return joblog.Decode(fh, f.IO.Out, opts)
	}
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			close(stop)
		case <-ctx.Done():
		}
	}()
	n := attempt
	if n == 0 {
		n = 1
	}
	for {
		var path string
		// Wait for attempt n to exist (or the run to end without it).
		for {
			as, err := st.Attempts(ctx, r.ID)
			if err != nil {
				return err
			}
			if len(as) >= n {
				path = as[n-1].LogPath
				break
			}
			cur, err := st.Resolve(ctx, r.ID)
			if err != nil {
				return err
			}
			if cur.Status != store.StatusRunning {
				return nil
			}
			select {
			case <-stop:
				return nil
			case <-time.After(200 * time.Millisecond):
			}
		}
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			time.Sleep(100 * time.Millisecond)
		}
		lastCheck := time.Time{}
		finished := false
		done := func() bool {
			if time.Since(lastCheck) < 250*time.Millisecond {
				return finished
			}
			lastCheck = time.Now()
			cur, err := st.Resolve(ctx, r.ID)
			if err != nil || cur.Status != store.StatusRunning || (attempt == 0 && cur.Attempts > n) {
				finished = true
			}
			return finished
		}
		if err := joblog.Follow(path, f.IO.Out, opts, 100*time.Millisecond, done, stop); err != nil {
			return Failf("follow log: %v", err)
		}
		select {
		case <-stop:
			return nil
		default:
		}
		cur, err := st.Resolve(ctx, r.ID)
		if err != nil {
			return err
		}
		if attempt != 0 || cur.Attempts <= n {
			return nil
		}
		n++
	}
}
