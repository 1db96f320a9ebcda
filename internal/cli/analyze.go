package cli

import "github.com/spf13/cobra"

// NewCmdAnalyze is a placeholder until its issue lands.
func NewCmdAnalyze(f *Factory) *cobra.Command {
	return &cobra.Command{Use: "analyze", Short: "(not yet available)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return Envf("analyze is not built yet") }}
}
