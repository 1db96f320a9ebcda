package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/probe"
)

// pythonPathOptions are python-path's flags after parsing.
type pythonPathOptions struct {
	JSON bool
}

// NewCmdPythonPath builds `vramguard python-path`.
func NewCmdPythonPath(f *Factory) *cobra.Command {
	return newCmdPythonPath(f, func(o *pythonPathOptions) error { return runPythonPath(f, o) })
}

func newCmdPythonPath(f *Factory, runF func(*pythonPathOptions) error) *cobra.Command {
	o := &pythonPathOptions{}
	cmd := &cobra.Command{
		Use:   "python-path [--json]",
		Short: "Print the directory holding vramguard's Python probe, for notebooks and custom launchers",
		Long: `python-path prints the directory that holds vramguard's in-process probe.
Installed with pip (pip install vramguard), that is the probe directory inside
the installed package, next to this binary; otherwise the probe built into the
binary is written under the state directory first, if this version of
vramguard has not yet done so. ` + "`vramguard run`" + ` puts the same directory on
PYTHONPATH by itself; use this command where vramguard does not launch Python:

  - in Jupyter or IPython, put it on sys.path and load the extension: the
    probe then reports to the machine-wide agent's socket
    ($VRAMGUARD_HOME/probe.sock, or VRAMGUARD_PROBE_SOCKET when set). In the
    environment vramguard was pip-installed into, ` + "`%load_ext vramguard`" + `
    alone does it;
  - in a launcher of your own, prepend it to PYTHONPATH and set the
    VRAMGUARD_PROBE_* variables described in docs/PROBE.md.

A directory under the state directory carries a digest of the probe's
content in its name, so different vramguard versions never overwrite each
other's probe. --json also says where it came from ("source": "package" or
"state").`,
		Example: `  # in a notebook cell
  import subprocess, sys
  sys.path.insert(0, subprocess.check_output(["vramguard", "python-path"], text=True).strip())
  %load_ext vramguard

  # in a shell
  export PYTHONPATH="$(vramguard python-path):$PYTHONPATH"

  # for scripts
  vramguard python-path --json | jq -r .path`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runF(o) },
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print {\"path\", \"digest\", \"protocol\", \"source\"} as JSON")
	return cmd
}

func runPythonPath(f *Factory, o *pythonPathOptions) error {
	dir, src, err := findProbe(f)
	if err != nil {
		return Failf("%v", err)
	}
	if o.JSON {
		return f.WriteJSON(map[string]any{"path": dir, "digest": probe.Digest(), "protocol": probe.Protocol, "source": src})
	}
	_, err = fmt.Fprintln(f.IO.Out, dir)
	return err
}
