package cli

import (
	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/termsafe"
)

// NewCmdExplain builds `vramguard explain`.
func NewCmdExplain(f *Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "explain [RUN]",
		Short: "Explain how a run ended: reason, evidence, what to change, memory timeline",
		Long: `Print the full post-mortem of a run (default: the last one): the reason code
(docs/FAILURES.md), the evidence behind it, the advice, every attempt, and a summary
of the memory timeline. --json prints one object (schema in docs/CLI.md).`,
		Example: `  vramguard explain
  vramguard explain bert --json | jq .oom`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ref := "last"
			if len(args) == 1 {
				ref = args[0]
			}
			st, r, err := f.openRun(ctx, ref)
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
	return cmd
}
