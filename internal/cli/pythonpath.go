package cli

import "github.com/spf13/cobra"

// NewCmdPythonPath is a placeholder until the probe lands.
func NewCmdPythonPath(f *Factory) *cobra.Command { return stub("python-path") }
