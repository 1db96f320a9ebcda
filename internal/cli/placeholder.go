package cli

import "github.com/spf13/cobra"

// stub is a hidden command for a feature that is not built yet.
func stub(name string) *cobra.Command {
	return &cobra.Command{Use: name, Hidden: true, RunE: func(*cobra.Command, []string) error { return Envf("%s is not built yet", name) }}
}
