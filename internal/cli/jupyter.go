package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/jupyter"
)

// JupyterInstallOptions are the flags of `vramguard jupyter install`.
type JupyterInstallOptions struct {
	User        bool
	SysPrefix   bool
	Prefix      string
	Name        string
	DisplayName string
	Python      string
	MemoryLimit string
	RunFlags    []string
	JSON        bool
}

// NewCmdJupyter builds `vramguard jupyter install|uninstall`.
func NewCmdJupyter(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jupyter",
		Short: "Install the Jupyter kernel that runs under vramguard",
		Long: `Install a Jupyter kernelspec that starts the usual IPython kernel under
'vramguard run --kernel' with the probe. Every kernel death is classified and kept
like any run ('vramguard runs', 'vramguard explain'); Jupyter's automatic restarts
of a kernel become attempts of the same run; and when a notebook's kernel died,
the next kernel of that notebook says why in the notebook, at its first cell.

See 'vramguard kernels' for which notebook holds which memory. docs/JUPYTER.md has the details.`,
		Example: `  # for yourself (~/.local/share/jupyter/kernels/vramguard)
  vramguard jupyter install --user

  # into the active virtualenv or conda env, capping each kernel's host memory
  vramguard jupyter install --sys-prefix --python "$(which python)" --memory-limit 32g

  vramguard jupyter uninstall --user`,
	}
	cmd.AddCommand(newCmdJupyterInstall(f), newCmdJupyterUninstall(f), newCmdJupyterList(f))
	return cmd
}

func newCmdJupyterInstall(f *Factory) *cobra.Command {
	o := &JupyterInstallOptions{}
	cmd := &cobra.Command{
		Use:   "install [flags] [-- RUN_FLAGS...]",
		Short: "Write the vramguard kernelspec",
		Long: `Write a kernelspec (kernel.json) whose command is

  vramguard run --kernel --name DISPLAY_NAME [RUN_FLAGS] -- PYTHON -m ipykernel_launcher -f {connection_file}

Where it goes: --user: Jupyter's data directory ($JUPYTER_DATA_DIR, else
~/.local/share/jupyter); --sys-prefix: PYTHON's sys.prefix/share/jupyter; --prefix
DIR: DIR/share/jupyter; none of these: /usr/local/share/jupyter (every user).
Flags after -- are passed to 'vramguard run' (see 'vramguard run --help').
Running install again replaces the kernelspec; a kernelspec of that name that
vramguard did not write is never overwritten.`,
		Example: `  vramguard jupyter install --user
  vramguard jupyter install --user --name torch-a100 --display-name "PyTorch (A100, guarded)" --python ~/venv/bin/python
  vramguard jupyter install --user --memory-limit 16g -- --stall-timeout 2h`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.RunFlags = args
			return runJupyterInstall(f, o)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&o.User, "user", false, "install for the current user")
	fl.BoolVar(&o.SysPrefix, "sys-prefix", false, "install into PYTHON's environment (virtualenv, conda)")
	fl.StringVar(&o.Prefix, "prefix", "", "install under DIR/share/jupyter/kernels")
	fl.StringVar(&o.Name, "name", "vramguard", "kernelspec name (directory)")
	fl.StringVar(&o.DisplayName, "display-name", "Python 3 (vramguard)", "name shown in the notebook's kernel menu, and the runs' name")
	fl.StringVar(&o.Python, "python", "", "Python interpreter that runs ipykernel (default: python3 on PATH)")
	fl.StringVar(&o.MemoryLimit, "memory-limit", "", "cap each kernel's host memory at SIZE (run --memory-limit)")
	fl.BoolVar(&o.JSON, "json", false, "print what was installed as JSON")
	return cmd
}

// kernelsDirFor picks the install directory from the location flags.
func kernelsDirFor(f *Factory, user, sysPrefix bool, prefix, python string) (string, error) {
	if err := oneLocation(user, sysPrefix, prefix); err != nil {
		return "", err
	}
	switch {
	case user:
		home, _ := os.UserHomeDir()
		return filepath.Join(jupyter.DataDir(f.Getenv, home), "kernels"), nil
	case prefix != "":
		abs, err := filepath.Abs(prefix)
		if err != nil {
			return "", Usagef("--prefix %s: %v", prefix, err)
		}
		return filepath.Join(abs, "share", "jupyter", "kernels"), nil
	case sysPrefix:
		out, err := exec.Command(python, "-c", "import sys; print(sys.prefix)").Output()
		if err != nil {
			return "", Envf("ask %s for its sys.prefix: %v", python, err)
		}
		return filepath.Join(strings.TrimSpace(string(out)), "share", "jupyter", "kernels"), nil
	}
	return jupyter.SystemKernelsDir, nil
}

func oneLocation(user, sysPrefix bool, prefix string) error {
	n := 0
	for _, b := range []bool{user, sysPrefix, prefix != ""} {
		if b {
			n++
		}
	}
	if n > 1 {
		return Usagef("give at most one of --user, --sys-prefix and --prefix")
	}
	return nil
}

func findPython(p string) (string, error) {
	if p == "" {
		p = "python3"
	}
	path, err := exec.LookPath(p)
	if err != nil {
		return "", Usagef("--python %s: %v", p, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", Usagef("--python %s: %v", p, err)
	}
	return abs, nil
}

func runJupyterInstall(f *Factory, o *JupyterInstallOptions) error {
	if !jupyter.ValidName(o.Name) {
		return Usagef("invalid --name %q: use letters, digits, '.', '_' and '-'", o.Name)
	}
	if strings.TrimSpace(o.DisplayName) == "" {
		return Usagef("--display-name must not be empty")
	}
	runFlags := append([]string(nil), o.RunFlags...)
	if o.MemoryLimit != "" {
		lim, err := parseBytes(o.MemoryLimit)
		if err != nil {
			return Usagef("--memory-limit: %v", err)
		}
		if lim < 4<<20 {
			return Usagef("--memory-limit %s is too small: give at least 4m", o.MemoryLimit)
		}
		runFlags = append([]string{"--memory-limit", o.MemoryLimit}, runFlags...)
	}
	if err := checkRunFlags(f, runFlags); err != nil {
		return err
	}
	if err := oneLocation(o.User, o.SysPrefix, o.Prefix); err != nil {
		return err
	}
	python, err := findPython(o.Python)
	if err != nil {
		return err
	}
	if err := exec.Command(python, "-c", "import ipykernel_launcher").Run(); err != nil {
		return Envf("%s cannot import ipykernel (install it: pip install ipykernel, or apt install python3-ipykernel)", python)
	}
	dir, err := kernelsDirFor(f, o.User, o.SysPrefix, o.Prefix, python)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return Envf("find the vramguard executable: %v", err)
	}
	if abs, err := filepath.EvalSymlinks(self); err == nil {
		self = abs
	}
	home := f.HomeFlag
	if home == "" {
		home = f.Getenv("VRAMGUARD_HOME")
	}
	if home != "" {
		if home, err = filepath.Abs(home); err != nil {
			return Usagef("--home: %v", err)
		}
	}
	spec := jupyter.NewSpec(jupyter.SpecOptions{Vramguard: self, Home: home, DisplayName: o.DisplayName,
		Python: python, RunFlags: runFlags, Version: currentVersion().Version})
	path, err := jupyter.Install(dir, o.Name, spec)
	if err != nil {
		if os.IsPermission(err) || strings.Contains(err.Error(), "permission denied") {
			return Envf("%v (use --user to install for yourself)", err)
		}
		return Failf("%v", err)
	}
	if o.JSON {
		return f.WriteJSON(map[string]any{"name": o.Name, "dir": path, "argv": spec.Argv, "display_name": spec.DisplayName})
	}
	fmt.Fprintf(f.IO.Out, "installed kernelspec %q in %s\n", o.Name, path)
	fmt.Fprintf(f.IO.ErrOut, "choose %q in the notebook's kernel menu; see which notebook holds what with 'vramguard kernels'\n", o.DisplayName)
	return nil
}

// checkRunFlags rejects run flags the kernelspec would fail on at every
// kernel start, now rather than then.
func checkRunFlags(f *Factory, flags []string) error {
	for _, a := range flags {
		if a == "--" {
			return Usagef("run flags after -- must not contain another --")
		}
		for _, bad := range []string{"--detach", "--kernel", "--json", "--restart"} {
			if a == bad || strings.HasPrefix(a, bad+"=") {
				return Usagef("%s cannot be used for a kernel (Jupyter restarts kernels itself)", bad)
			}
		}
	}
	c := NewCmdRun(f)
	if err := c.Flags().Parse(flags); err != nil {
		return Usagef("run flags: %v", err)
	}
	if extra := c.Flags().Args(); len(extra) > 0 {
		return Usagef("run flags: unexpected %q (give only flags after --)", extra[0])
	}
	return nil
}

func newCmdJupyterUninstall(f *Factory) *cobra.Command {
	var user, sysPrefix, all bool
	var prefix, name, python string
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove the vramguard kernelspec",
		Long: `Remove the vramguard kernelspec from the place --user, --sys-prefix or --prefix
name (none: /usr/local/share/jupyter), or with --all from every directory Jupyter
searches ($JUPYTER_PATH, the user's data directory, the system ones). Only
kernelspecs vramguard wrote are removed. The runs of past kernels stay
('vramguard runs').`,
		Example: `  vramguard jupyter uninstall --user
  vramguard jupyter uninstall --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			home, _ := os.UserHomeDir()
			var dirs []string
			if all {
				if user || sysPrefix || prefix != "" {
					return Usagef("--all cannot be combined with --user, --sys-prefix or --prefix")
				}
				var extra []string
				if py, err := findPython(python); err == nil {
					if out, err := exec.Command(py, "-c", "import sys; print(sys.prefix)").Output(); err == nil {
						extra = append(extra, filepath.Join(strings.TrimSpace(string(out)), "share", "jupyter", "kernels"))
					}
				}
				dirs = jupyter.KernelsDirs(f.Getenv, home, extra...)
			} else {
				py := ""
				if sysPrefix {
					var err error
					if py, err = findPython(python); err != nil {
						return err
					}
				}
				d, err := kernelsDirFor(f, user, sysPrefix, prefix, py)
				if err != nil {
					return err
				}
				dirs = []string{d}
			}
			if all {
				name = cmd.Flag("name").Value.String()
				if !cmd.Flags().Changed("name") {
					name = "" // every vramguard kernelspec
				}
			}
			found, err := jupyter.Installed(dirs, name)
			if err != nil && len(found) == 0 {
				f.Logger().Warn("kernelspec directories", "err", err)
			}
			if len(found) == 0 {
				return Failf("no vramguard kernelspec %s in %s", nameOrAll(name), strings.Join(dirs, ", "))
			}
			for _, d := range found {
				if err := jupyter.Uninstall(d); err != nil {
					if os.IsPermission(err) || strings.Contains(err.Error(), "permission denied") {
						return Envf("%v", err)
					}
					return Failf("%v", err)
				}
				fmt.Fprintf(f.IO.Out, "removed %s\n", d)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&user, "user", false, "remove the current user's kernelspec")
	fl.BoolVar(&sysPrefix, "sys-prefix", false, "remove it from PYTHON's environment")
	fl.StringVar(&prefix, "prefix", "", "remove it from DIR/share/jupyter/kernels")
	fl.BoolVar(&all, "all", false, "remove vramguard kernelspecs from every directory Jupyter searches")
	fl.StringVar(&name, "name", "vramguard", "kernelspec name")
	fl.StringVar(&python, "python", "", "Python whose sys.prefix --sys-prefix means")
	return cmd
}

func nameOrAll(name string) string {
	if name == "" {
		return "at all"
	}
	return fmt.Sprintf("%q", name)
}

func newCmdJupyterList(f *Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List installed vramguard kernelspecs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			home, _ := os.UserHomeDir()
			found, _ := jupyter.Installed(jupyter.KernelsDirs(f.Getenv, home), "")
			found = emptyIfNil(found)
			if asJSON {
				return f.WriteJSON(found)
			}
			for _, d := range found {
				fmt.Fprintln(f.IO.Out, d)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON list of directories")
	return cmd
}
