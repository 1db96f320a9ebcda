package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/doctor"
)

// doctorOptions are doctor's flags after parsing.
type doctorOptions struct {
	Python        string
	PythonGiven   bool
	Dir           string
	Keep          int
	JSON          bool
	PythonTimeout time.Duration
	Root          string // hidden: examine a fixture tree instead of "/"
}

// NewCmdDoctor builds `vramguard doctor`.
func NewCmdDoctor(f *Factory) *cobra.Command {
	return newCmdDoctor(f, func(ctx context.Context, o *doctorOptions) error { return runDoctor(ctx, f, o) })
}

func newCmdDoctor(f *Factory, runF func(context.Context, *doctorOptions) error) *cobra.Command {
	o := &doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor [--python PATH] [--dir CHECKPOINT_DIR] [--json]",
		Short: "Check the environment for the classic GPU-training failures before they happen",
		Long: `doctor checks this machine for what kills training jobs later: a driver too
old for the installed torch, a CPU-only torch on a GPU machine, Docker's 64 MB
/dev/shm, a container memory limit, checkpoints on a container's throwaway
layer, a missing environment lock, low open-file limits and more.

Each check reports ok, warn, fail or n/a (not applicable here, such as the
GPU checks on a machine without an NVIDIA driver), with its evidence and
the fix. torch is probed with --python in a subprocess (never in
vramguard's own process) and bounded by --python-timeout.

Exit status: 0 when nothing fails (warnings do not fail), 1 when any check
fails, 2 for bad input. Check ids and the --json layout are in docs/DOCTOR.md.`,
		Example: `  # the interpreter your job uses, and where it saves checkpoints
  vramguard doctor --python .venv/bin/python --dir /data/ckpt

  # Debian's packaged torch
  vramguard doctor --python /usr/bin/python3

  # for scripts: list what failed
  vramguard doctor --json | jq -r '.checks[] | select(.status=="fail") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.PythonGiven = c.Flags().Changed("python")
			if o.Keep < 1 {
				return Usagef("--keep must be at least 1, got %d", o.Keep)
			}
			if o.PythonTimeout <= 0 {
				return Usagef("--python-timeout must be positive, got %s", o.PythonTimeout)
			}
			return runF(c.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Python, "python", "python3", "Python interpreter to probe for torch (the one your job runs with)")
	fl.StringVar(&o.Dir, "dir", "", "checkpoint directory to check (filesystem, free space, writability)")
	fl.IntVar(&o.Keep, "keep", 3, "how many checkpoints the job keeps (sizes the free-space check)")
	fl.BoolVar(&o.JSON, "json", false, "print the report as JSON (schema in docs/DOCTOR.md)")
	fl.DurationVar(&o.PythonTimeout, "python-timeout", 15*time.Second, "give up on the Python interpreter's import torch after this long")
	fl.StringVar(&o.Root, "root", "", "examine a fixture tree (a directory or a .txtar archive) instead of /")
	_ = fl.MarkHidden("root")
	return cmd
}

// resolvePython finds the interpreter: a path is checked as given, a bare
// name is looked up on PATH. A missing default is not an input error (the
// pytorch checks report it); a missing --python is.
func resolvePython(o *doctorOptions) (string, error) {
	p := o.Python
	if p == "" {
		return "", Usagef("--python must not be empty")
	}
	if strings.ContainsRune(p, '/') {
		st, err := os.Stat(p)
		if err != nil {
			return "", Usagef("--python %s: %v", p, err)
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return "", Usagef("--python %s: not an executable file", p)
		}
		return p, nil
	}
	found, err := exec.LookPath(p)
	if err != nil {
		if o.PythonGiven {
			return "", Usagef("--python %s: not found on PATH", p)
		}
		return "", nil
	}
	return found, nil
}

func runDoctor(ctx context.Context, f *Factory, o *doctorOptions) error {
	py := o.Python
	var err error
	if strings.HasSuffix(o.Root, ".txtar") {
		// A fixture archive: unpack it for this run.
		tmp, err := os.MkdirTemp("", "vramguard-doctor-root-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := doctor.ExtractTxtar(o.Root, tmp); err != nil {
			return Usagef("--root %s: %v", o.Root, err)
		}
		o.Root = tmp
	}
	if o.Root == "" {
		if py, err = resolvePython(o); err != nil {
			return err
		}
	}
	dir := o.Dir
	if dir != "" {
		if o.Root == "" {
			if dir, err = filepath.Abs(dir); err != nil {
				return Usagef("--dir %s: %v", o.Dir, err)
			}
		}
		st, err := os.Stat(filepath.Join(o.Root, dir))
		if err != nil {
			return Usagef("--dir %s: %v", o.Dir, err)
		}
		if !st.IsDir() {
			return Usagef("--dir %s: not a directory", o.Dir)
		}
	}
	var env doctor.Env
	if o.Root != "" {
		// A fixture tree: everything that is not a file comes from its
		// .doctor/fixture.json.
		fx, err := doctor.LoadFixture(o.Root)
		if err != nil {
			return Usagef("--root %s: %v", o.Root, err)
		}
		env = fx.Build(o.Root)
	} else {
		cwd, _ := os.Getwd()
		if py != "" {
			py = doctor.ResolvePyenvShim(py, cwd, f.Getenv)
		}
		env = doctor.Env{
			Getenv: f.Getenv,
			Statfs: doctor.LiveStatfs(""),
			GPU:    doctorGPU(ctx),
			Python: doctor.ExecPython{},
			Cwd:    cwd,
			Now:    f.Now,
		}
	}
	rep := doctor.Run(ctx, env, doctor.Options{Python: py, Dir: dir, Keep: o.Keep, PythonTimeout: o.PythonTimeout})
	if r, ok := stateDirCheck(f); ok {
		addCheck(rep, r)
	}
	if rep.Python == "" {
		rep.Python = o.Python
	}
	if o.JSON {
		if err := f.WriteJSON(rep); err != nil {
			return err
		}
	} else if err := renderDoctor(f.IO.Out, rep, f.IO.IsTTY, f.termWidth()); err != nil {
		return err
	}
	if rep.Failed() {
		return Silent(ExitFailed)
	}
	return nil
}

// doctorGPU picks the GPU source: the NVML backend, which reports
// gpu.ErrNoDriver on a machine without the driver (the GPU checks then say
// n/a).
func doctorGPU(_ context.Context) doctor.GPU { return doctor.NVML{} }
