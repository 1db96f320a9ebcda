package cli

import "github.com/spf13/cobra"

func stub(name string) *cobra.Command {
	return &cobra.Command{Use: name, Hidden: true, RunE: func(*cobra.Command, []string) error { return Envf("%s is not built yet", name) }}
}
func NewCmdRun(f *Factory) *cobra.Command     { return stub("run") }
func NewCmdRuns(f *Factory) *cobra.Command    { return stub("runs") }
func NewCmdLogs(f *Factory) *cobra.Command    { return stub("logs") }
func NewCmdExplain(f *Factory) *cobra.Command { return stub("explain") }
func NewCmdStop(f *Factory) *cobra.Command    { return stub("stop") }
