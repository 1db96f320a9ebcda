package cli

import (
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/supervise"
)

// NewCmdStop builds `vramguard stop`.
func NewCmdStop(f *Factory) *cobra.Command {
	var kill bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "stop [--kill] RUN",
		Short: "Stop a running job (SIGTERM to the whole job, then SIGKILL after its stop timeout)",
		Example: `  vramguard stop bert
  vramguard stop --kill last`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, r, err := f.openRun(ctx, args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			if r.Status != store.StatusRunning {
				return Failf("run %s is not running (%s, reason %s)", r.ID, r.Status, dash(r.Reason))
			}
			if !supervise.Alive(procfs.FS{}, r.SupervisorPID, r.SupervisorStart) {
				return Failf("the supervisor of run %s (pid %d) is gone", r.ID, r.SupervisorPID)
			}
			if err := syscall.Kill(r.SupervisorPID, syscall.SIGTERM); err != nil {
				return Failf("signal the supervisor of %s: %v", r.ID, err)
			}
			if kill {
				time.Sleep(50 * time.Millisecond)
				syscall.Kill(r.SupervisorPID, syscall.SIGTERM)
			}
			deadline := time.Now().Add(wait)
			for time.Now().Before(deadline) {
				cur, err := st.Resolve(ctx, r.ID)
				if err == nil && cur.Status != store.StatusRunning {
					fmt.Fprintf(f.IO.Out, "stopped %s (%s)\n", r.ID, dash(cur.Reason))
					return nil
				}
				time.Sleep(100 * time.Millisecond)
			}
			return Failf("run %s still running after %s", r.ID, wait)
		},
	}
	cmd.Flags().BoolVar(&kill, "kill", false, "kill at once instead of letting the job shut down")
	cmd.Flags().DurationVar(&wait, "wait", 60*time.Second, "how long to wait for the run to end")
	return cmd
}
