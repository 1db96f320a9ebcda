package cli

import "github.com/spf13/cobra"

// NewCmdCkpt is a placeholder until its issue lands.
func NewCmdCkpt(f *Factory) *cobra.Command {
	return &cobra.Command{Use: "ckpt", Short: "(not yet available)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return Envf("ckpt is not built yet") }}
}
