package cli

import (
	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/termsafe"
)

// NewCmdExplain builds `vramguard explain`.
func NewCmdExplain(f *Factory) *cobra.Command {
	var asJSON bool
	var group string
	cmd := &cobra.Command{
		Use:   "explain [RUN | --group GROUP]",
		Short: "Explain how a run ended: reason, evidence, what to change, memory timeline",
		Long: `Print the full post-mortem of a run (default: the last one): the reason code
(docs/FAILURES.md), the evidence behind it, the advice, every attempt, and a summary
of the memory timeline. --json prints one object (schema in docs/CLI.md).

--group GROUP tells the story of a distributed job whose tasks each ran under
their own vramguard run, on any of its nodes (srun vramguard run ...): GROUP is
what run --group recorded (the Slurm job id by default, else torchrun's run id).
Every rank with its node, PID, exit, reason, steps, peaks and last line; the
rank that failed first across all nodes, whose reason is the job's; every
other failed rank collateral (peer_failed) with what it died of. It reads the
ranks' records in $VRAMGUARD_GROUP_DIR (default: the state directory's
groups/, docs/CLUSTER.md).`,
		Example: `  vramguard explain
  vramguard explain bert --json | jq .oom
  vramguard explain --group "$SLURM_JOB_ID" --json | jq .root_cause`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if cmd.Flags().Changed("group") {
				if len(args) > 0 {
					return Usagef("explain: give RUN or --group GROUP, not both")
				}
				return explainGroup(f, group, asJSON)
			}
			st, r, err := f.openRun(ctx, runArg(args))
			if err != nil {
				return err
			}
			defer st.Close()
			doc, err := postmortem.Build(ctx, st, r, f.Now())
			if err != nil {
				return err
			}
			if asJSON {
				return f.WriteJSON(doc)
			}
			// The job wrote the evidence: show its escape sequences, never obey them.
			postmortem.Render(termsafe.Writer(f.IO.Out), doc)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().StringVar(&group, "group", "", "tell a distributed job's story across its nodes: GROUP is run --group's (default there: the Slurm job id)")
	return cmd
}
