package cli

import "github.com/spf13/cobra"

// NewCmdDoctor is a placeholder until its issue lands.
func NewCmdDoctor(f *Factory) *cobra.Command {
	return &cobra.Command{Use: "doctor", Short: "(not yet available)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return Envf("doctor is not built yet") }}
}
