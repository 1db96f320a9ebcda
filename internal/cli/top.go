package cli

import "github.com/spf13/cobra"

// NewCmdTop is a placeholder until its issue lands.
func NewCmdTop(f *Factory) *cobra.Command {
	return &cobra.Command{Use: "top", Short: "(not yet available)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return Envf("top is not built yet") }}
}
