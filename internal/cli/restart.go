package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
)

// restartDoc is what `restart --json` prints.
type restartDoc struct {
	RunID       string `json:"run_id"`
	Name        string `json:"name"`
	Ended       int    `json:"ended_attempt"`
	EndedReason string `json:"ended_reason"`
	Attempt     int    `json:"attempt"`
	PID         int    `json:"pid"`
	ResumeFrom  string `json:"resume_from"`
}

// NewCmdRestart builds `vramguard restart`.
func NewCmdRestart(f *Factory) *cobra.Command {
	var wait time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "restart RUN",
		Short: "Restart a running job now: end its processes and start the next attempt (resuming with --resume-from)",
		Long: `Restart the running attempt of RUN: its whole process tree gets SIGTERM, then
SIGKILL after the run's --stop-timeout, as with stop; the supervisor then starts
the next attempt at once. A run started with --resume-from resumes from the newest
checkpoint that passes the check. The restart happens whatever --restart says and
does not count against --max-restarts; the ended attempt's reason is "restarted"
(vramguard explain shows it).

Only the run's owner (or root) can restart it: the request goes over the
supervisor's control socket, which only its user can reach. (Signals are the
job's: a SIGUSR1 sent to vramguard, as Slurm's --signal=USR1@90 sends it, is
delivered to the job and restarts nothing.) Waits until the new attempt runs
and prints it.`,
		Example: `  # pick up a changed data file or a fixed config; the run and its logs stay one
  vramguard restart bert

  # in a script
  vramguard restart --json last | jq .attempt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, r, err := f.signalRun(ctx, args[0], runctl.OpRestart)
			if err != nil {
				return err
			}
			defer st.Close()
			var next *store.Attempt
			cur, ok := awaitRun(ctx, st, r.ID, wait, func(cur *store.Run) bool {
				if cur.Status != store.StatusRunning {
					return true
				}
				atts, err := st.Attempts(ctx, r.ID)
				if err != nil || len(atts) == 0 {
					return false
				}
				last := atts[len(atts)-1]
				if last.N > r.Attempts && (last.PID > 0 || last.EndedAt != nil) {
					next = last
					return true
				}
				return false
			})
			switch {
			case !ok:
				return Failf("run %s started no new attempt within %s (a job that ignores SIGTERM is killed after the run's --stop-timeout)", r.ID, wait)
			case next == nil:
				return Failf("run %s ended (%s) instead of restarting", r.ID, dash(cur.Reason))
			case next.PID == 0:
				return Failf("run %s: attempt %d could not start (%s)", r.ID, next.N, dash(next.Reason))
			}
			doc := restartDoc{RunID: r.ID, Name: r.Name, Ended: r.Attempts, Attempt: next.N, PID: next.PID, ResumeFrom: next.ResumeFrom}
			if atts, err := st.Attempts(ctx, r.ID); err == nil {
				for _, a := range atts {
					if a.N == r.Attempts {
						doc.EndedReason = a.Reason
					}
				}
			}
			if asJSON {
				return f.WriteJSON(doc)
			}
			fmt.Fprintf(f.IO.Out, "restarted %s: attempt %d ended (%s), attempt %d runs as pid %d\n",
				r.ID, doc.Ended, dash(doc.EndedReason), doc.Attempt, doc.PID)
			if doc.ResumeFrom != "" {
				fmt.Fprintf(f.IO.Out, "resuming from %s\n", doc.ResumeFrom)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 60*time.Second, "how long to wait for the new attempt to start")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the ended and the new attempt as JSON")
	return cmd
}
