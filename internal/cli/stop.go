package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
)

// NewCmdStop builds `vramguard stop`.
func NewCmdStop(f *Factory) *cobra.Command {
	var kill bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "stop [--kill] RUN",
		Short: "Stop a running job (SIGTERM to the job, then SIGKILL after its stop timeout)",
		Long: `Stop the running job of RUN: the job's process group gets SIGTERM, then SIGKILL
after the run's --stop-timeout (at once with --kill); it is not restarted.

Only the run's owner (or root) can stop it: the request goes over the
supervisor's control socket, which only its user can reach.`,
		Example: `  vramguard stop bert
  vramguard stop --kill last`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			op := runctl.OpStop
			if kill {
				op = runctl.OpKill
			}
			st, r, err := f.signalRun(ctx, args[0], op)
			if err != nil {
				return err
			}
			defer st.Close()
			cur, ok := awaitRun(ctx, st, r.ID, wait, func(cur *store.Run) bool { return cur.Status != store.StatusRunning })
			if !ok {
				return Failf("run %s still running after %s", r.ID, wait)
			}
			fmt.Fprintf(f.IO.Out, "stopped %s (%s)\n", r.ID, dash(cur.Reason))
			return nil
		},
	}
	cmd.Flags().BoolVar(&kill, "kill", false, "kill at once instead of letting the job shut down")
	cmd.Flags().DurationVar(&wait, "wait", 60*time.Second, "how long to wait for the run to end")
	return cmd
}

// signalRun finds RUN and sends op to its supervisor's control socket, once
// it is sure the run is running and the supervisor is the process that
// recorded it (see runctl.Request); the caller closes the store. r is the
// run as it was before the request.
func (f *Factory) signalRun(ctx context.Context, ref string, op runctl.Op) (st *store.Store, r *store.Run, err error) {
	st, r, err = f.openRun(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if err := runctl.Request(procfs.FS{}, r, op); err != nil {
		st.Close()
		return nil, nil, Failf("%v", err)
	}
	return st, r, nil
}

// awaitRun re-reads run id until done holds or wait has passed, and returns
// the last record read and whether done held.
func awaitRun(ctx context.Context, st *store.Store, id string, wait time.Duration, done func(*store.Run) bool) (*store.Run, bool) {
	deadline := time.Now().Add(wait)
	for {
		cur, err := st.Resolve(ctx, id)
		if err == nil && done(cur) {
			return cur, true
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return cur, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
