// Package cli builds vramguard's command tree. Each command lives in its own
// file as NewCmdX(f *Factory) and turns flags into options for a package that
// does the work; nothing here holds domain logic.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/supervise"
)

// Exit codes, documented in docs/CLI.md.
const (
	ExitOK      = 0 // success
	ExitFailed  = 1 // the job or the check failed
	ExitUsage   = 2 // bad usage or input
	ExitEnv     = 3 // environment missing (no GPU where one is required, ...)
	ExitUnknown = 1
)

// ExitError carries an exit code through cobra. A nil Err prints nothing.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}
func (e *ExitError) Unwrap() error { return e.Err }

// Usagef returns an error that exits 2.
func Usagef(format string, a ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, a...)}
}

// Failf returns an error that exits 1.
func Failf(format string, a ...any) error {
	return &ExitError{Code: ExitFailed, Err: fmt.Errorf(format, a...)}
}

// Envf returns an error that exits 3.
func Envf(format string, a ...any) error {
	return &ExitError{Code: ExitEnv, Err: fmt.Errorf(format, a...)}
}

// Silent exits with code without printing anything more.
func Silent(code int) error { return &ExitError{Code: code} }

// Main runs the CLI and returns the process exit code.
func Main(args []string) int {
	nameProcess()
	if len(args) > 0 && args[0] == supervise.ShimCommand {
		return supervise.RunShim(args[1:])
	}
	return Execute(context.Background(), NewFactory(), args)
}

// Execute runs the command line args with f and returns the exit code, as
// Main does for the real process. Tests that inject f's clock or streams
// into a whole command (a supervised run whose clock runs faster than the
// wall clock) call it.
func Execute(ctx context.Context, f *Factory, args []string) int {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	return exitCode(f, root.ExecuteContext(ctx))
}

// nameProcess names this process "vramguard" (its comm, which ps, top and
// /proc/PID/status show to every user), whatever its file is called: a
// supervisor or shim is then known as vramguard's, not taken for the
// kernel or job whose command line it carries. A failure changes nothing.
func nameProcess() {
	_ = os.WriteFile("/proc/self/comm", []byte("vramguard"), 0)
}

func exitCode(f *Factory, err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(f.IO.ErrOut, "vramguard:", ee.Err)
		}
		return ee.Code
	}
	// Errors from cobra's own flag and argument parsing are usage errors.
	fmt.Fprintln(f.IO.ErrOut, "vramguard:", err)
	return ExitUsage
}

// NewCmdRoot builds the whole command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "vramguard",
		Short: "Supervise GPU training jobs, explain their deaths, watch GPU memory, manage checkpoints",
		Long: `vramguard supervises PyTorch training jobs and watches GPU memory.

  vramguard run -- python train.py     run a job: logs, memory, a post-mortem, restarts
  vramguard runs / logs / explain      what happened to earlier runs
  vramguard analyze TRACE.csv          tell a leak from the allocator's cache
  vramguard ckpt ls|inspect|verify     checkpoints without Python
  vramguard snapshot FILE | diff A B   CUDA memory snapshots without Python: sites, fragmentation, leaks
  vramguard top                        every GPU process, grouped by job, container, pod, notebook
  vramguard serve                      dashboard, JSON API, Prometheus /metrics and alerts
  vramguard report                     GPU-hours, idle hours and deaths per user, job or GPU
  vramguard jupyter install / kernels  kernels that explain their deaths; which notebook holds what
  vramguard doctor                     check the environment before it bites

State lives in $VRAMGUARD_HOME (default ~/.local/state/vramguard).
Exit codes: 0 ok, 1 the job or check failed, 2 bad usage or input,
3 environment missing; a supervised job's own status is mirrored (signal N -> 128+N).`,
		Version:       currentVersion().short(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			printNotices(cmd.Context(), f, cmd)
		},
	}
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.PersistentFlags().StringVar(&f.HomeFlag, "home", "", "state directory (overrides $VRAMGUARD_HOME)")
	root.PersistentFlags().BoolVarP(&f.Verbose, "verbose", "v", false, "log diagnostics to stderr")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return Usagef("%v\nRun '%s --help' for usage.", err, c.CommandPath())
	})
	for _, add := range commands {
		root.AddCommand(add(f))
	}
	registerCompletions(f, root)
	return root
}

// commands lists every subcommand constructor; each file registers itself in
// this one list so the tree is built in one place and in a stable order.
var commands = []func(*Factory) *cobra.Command{
	NewCmdRun,
	NewCmdRuns,
	NewCmdLogs,
	NewCmdExplain,
	NewCmdStop,
	NewCmdRestart,
	NewCmdAnalyze,
	NewCmdCkpt,
	NewCmdSnapshot,
	NewCmdTop,
	NewCmdReport,
	NewCmdDoctor,
	NewCmdPythonPath,
	NewCmdServe,
	NewCmdJupyter,
	NewCmdKernels,
	NewCmdVersion,
}

// stdinIsTTY reports whether fd is a terminal.
func isTerminal(fd uintptr) bool {
	_, err := ioctlGetTermios(int(fd))
	return err == nil
}
