package cli

import (
	"bufio"
	"context"
	"fmt"
	"github.com/vramguard/vramguard/internal/termsafe"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/units"
)

// KernelsOptions are the flags shared by `vramguard kernels` and its actions.
type KernelsOptions struct {
	RuntimeDirs []string
	JSON        bool
	Simulate    string
	GPUBackend  string
	Timeout     time.Duration
	// IdleWindow is how long a kernel Jupyter calls idle, holding GPU
	// memory, must have been so to be flagged idle (--idle-window).
	IdleWindow time.Duration
}

// NewCmdKernels builds `vramguard kernels` and its actions.
func NewCmdKernels(f *Factory) *cobra.Command {
	o := &KernelsOptions{}
	var agentSpec string
	cmd := &cobra.Command{
		Use:   "kernels",
		Short: "Which notebook holds which memory: Jupyter kernels with their GPU memory, RSS and idle time",
		Long: `List the kernels of every running Jupyter server (found through the runtime
files jpserver-*.json and nbserver-*.json, asked with each server's token), each with
its notebook, its process and its owner (USER: the kernel process's login name,
its UID where /etc/passwd has none, "unknown" when the process is not found),
found by the connection file on its command line (a server's
kernel-ID.json, or any other client's file, so kernels in containers are found as well), the GPU memory of the kernel and every
process it started, PyTorch's allocated/reserved figures when the probe reports them,
host RSS, state and how long it has been idle. FLAGS says "idle" for an idle
holder: a kernel Jupyter calls idle, with no activity for --idle-window (30m),
that holds GPU memory (the "idle" field of --json). A kernel run by vramguard's kernelspec
shows the run that supervises it: vramguard's own processes, which carry the kernel's
command line too, are told apart by their executable, whatever vramguard is called.

On a shared machine (serve --shared running), kernels lists through the agent's
socket: every user's kernels, another user's with owner and memory only (--agent
none looks here instead).

Actions go through the server's REST API, as the notebook's own menu would:

  vramguard kernels interrupt|restart|shutdown NOTEBOOK|KERNEL_ID...

On a shared machine they go through the agent, which asks the kernel's server:
a user may act on their own kernels only, root and serve's --admin-group on any.

With --idle-longer-than and --holding-gpu they select kernels instead, and list
what they would do unless --yes is given.`,
		Example: `  vramguard kernels
  vramguard kernels --json | jq '.[] | {notebook, gpu_bytes, idle_s}'
  vramguard kernels shutdown analysis.ipynb
  vramguard kernels shutdown --idle-longer-than 2h --holding-gpu          # list only
  vramguard kernels shutdown --idle-longer-than 2h --holding-gpu --yes    # do it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.IdleWindow <= 0 {
				return Usagef("--idle-window must be positive")
			}
			entries, err := kernelsFromAgent(cmd.Context(), f, o, agentSpec)
			if err == nil && entries == nil {
				entries, err = collectKernels(cmd.Context(), f, o)
			}
			if err != nil {
				return err
			}
			if o.JSON {
				return f.WriteJSON(entries)
			}
			printKernels(f.IO.Out, entries)
			return nil
		},
	}
	addKernelsFlags(cmd, o)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print a JSON list, one object per kernel")
	cmd.Flags().StringVar(&agentSpec, "agent", "auto", "list the machine's kernels through a machine-wide agent (serve --shared): auto (its socket under "+probe.SharedDirDefault+" when one runs), none, or its API socket")
	for _, a := range []string{"interrupt", "restart", "shutdown"} {
		cmd.AddCommand(newCmdKernelAction(f, a))
	}
	return cmd
}

func addKernelsFlags(cmd *cobra.Command, o *KernelsOptions) {
	fl := cmd.Flags()
	fl.StringArrayVar(&o.RuntimeDirs, "runtime-dir", nil, "look only in DIR for servers and kernels (repeatable; default: $JUPYTER_RUNTIME_DIR and Jupyter's data directory, every user's for root, and every kernel process found)")
	fl.StringVar(&o.GPUBackend, "gpu-backend", "auto", "where GPU memory is read: auto, nvml, none or sim:SCENARIO")
	fl.DurationVar(&o.Timeout, "timeout", 10*time.Second, "how long to wait for a server's answer")
	fl.DurationVar(&o.IdleWindow, "idle-window", jupyter.DefaultIdleWindow, "flag a kernel idle when Jupyter has called it idle this long and it holds GPU memory")
	addGPUFlags(cmd, &o.Simulate)
}

func (o *KernelsOptions) dirs(f *Factory) []string {
	if len(o.RuntimeDirs) > 0 {
		return o.RuntimeDirs
	}
	home, _ := os.UserHomeDir()
	return jupyter.RuntimeDirs(f.Getenv, home, os.Geteuid() == 0)
}

// collectKernels asks every server and joins the answers with /proc, the
// GPU and the run store.
func collectKernels(ctx context.Context, f *Factory, o *KernelsOptions) ([]jupyter.Entry, error) {
	servers, err := jupyter.Discover(o.dirs(f))
	if err != nil {
		f.Logger().Warn("server files", "err", err)
	}
	gb, note, err := openGPU(ctx, o.Simulate, o.GPUBackend)
	if err != nil {
		return nil, err
	}
	defer gb.Close()
	if note != "" {
		f.Logger().Info("gpu", "note", note)
	}
	var jobs []attrib.Job
	if gprocs, err := gb.Processes(ctx); err != nil {
		f.Logger().Warn("gpu processes", "err", err)
	} else if len(gprocs) > 0 {
		a := &attrib.Attributor{Src: procSource(gb, "")}
		res, err := a.Attribute(gprocs)
		a.Close()
		if err != nil {
			return nil, Failf("%v", err)
		}
		jobs = res.Jobs
	}
	c := &jupyter.Collector{Servers: servers, Procs: jupyter.LiveProcs{}, Jobs: jobs, Now: f.Now, Timeout: o.Timeout, IdleWindow: o.IdleWindow}
	if len(o.RuntimeDirs) > 0 {
		// kernels no server listed: only those of the named directories
		for _, d := range o.RuntimeDirs {
			if abs, err := filepath.Abs(d); err == nil {
				d = abs
			}
			c.Scope = append(c.Scope, d)
		}
	}
	entries, err := c.Collect(ctx)
	if err != nil {
		if entries == nil {
			return nil, Failf("%v", err)
		}
		fmt.Fprintf(f.IO.ErrOut, "vramguard: %v\n", err)
	}
	if st, err := f.openStore(ctx); err == nil {
		if ks, err := st.Kernels(ctx); err == nil {
			runs := map[string]string{}
			for _, k := range ks {
				runs[k.KernelID] = k.RunID
			}
			for i := range entries {
				if entries[i].Supervised && entries[i].RunID == "" {
					entries[i].RunID = runs[entries[i].KernelID]
				}
			}
		}
		st.Close()
	}
	return entries, nil
}

// kernelsFromAgent lists the machine's kernels through a machine-wide
// agent when one runs (--agent): every user's kernel with its owner and
// memory, details of the caller's own only. It returns nil entries when
// kernels should be collected here (no agent, or --runtime-dir,
// --simulate or --gpu-backend given).
func kernelsFromAgent(ctx context.Context, f *Factory, o *KernelsOptions, spec string) ([]jupyter.Entry, error) {
	local := len(o.RuntimeDirs) > 0 || o.Simulate != "" || (o.GPUBackend != "" && o.GPUBackend != "auto")
	if local {
		if spec != "auto" && spec != "none" {
			return nil, Usagef("--agent %s cannot be used with --runtime-dir, --simulate or --gpu-backend (they look here)", spec)
		}
		return nil, nil
	}
	sock, err := agentSocket(spec, f.Getenv)
	if err != nil || sock == "" {
		return nil, err
	}
	var got struct{ Kernels []jupyter.Entry }
	ctx, cancel := context.WithTimeout(ctx, o.Timeout+5*time.Second)
	defer cancel()
	if err := getAgent(ctx, agentClient(sock, o.Timeout+5*time.Second), "/api/v1/kernels", &got); err != nil {
		if spec != "auto" {
			return nil, Envf("the agent at %s did not answer: %v", sock, err)
		}
		fmt.Fprintf(f.IO.ErrOut, "vramguard: the agent at %s did not answer (%v); looking at this user's servers directly\n", sock, err)
		return nil, nil
	}
	got.Kernels = emptyIfNil(got.Kernels)
	return got.Kernels, nil
}

func printKernels(w io.Writer, es []jupyter.Entry) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no kernels (no running Jupyter server found, or none has a kernel)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NOTEBOOK\tKERNEL\tPID\tUSER\tGPU\tALLOC/RESERVED\tRSS\tSTATE\tIDLE\tRUN\tFLAGS")
	for _, e := range es {
		nb := e.Notebook
		if nb == "" {
			nb = "(no notebook)"
		}
		pid := "-"
		if e.PID > 0 {
			pid = fmt.Sprint(e.PID)
		}
		alloc := "-"
		if e.AllocatedBytes != nil {
			alloc = units.FormatBytes(*e.AllocatedBytes) + " / " + units.FormatBytes(*e.ReservedBytes)
		}
		run := e.RunID
		if run == "" {
			run = "-"
		}
		flags := "-"
		if e.Idle {
			flags = "idle"
		}
		// shown, never obeyed: a notebook's name is its owner's to choose
		line := termsafe.Line
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", line(nb), line(shortKernel(e.KernelID)), pid, line(e.User), units.FormatBytes(e.GPUBytes),
			alloc, units.FormatBytes(e.RSSBytes), line(e.ExecutionState), humanDur(e.IdleS), line(run), flags)
	}
	tw.Flush()
}

func shortKernel(id string) string {
	if h, ok := strings.CutPrefix(id, jupyter.OpaqueKernelPrefix); ok && len(h) > 6 {
		return jupyter.OpaqueKernelPrefix + h[:6] // another user's, as the shared agent shows it
	}
	if len(id) > 8 {
		id = id[:8]
	}
	return termsafe.Line(id)
}

// kernelActionOptions are the flags of interrupt, restart and shutdown.
type kernelActionOptions struct {
	KernelsOptions
	Agent          string
	IdleLongerThan time.Duration
	HoldingGPU     bool
	Yes            bool
}

var actionPast = map[string]string{"interrupt": "interrupted", "restart": "restarted", "shutdown": "shut down"}

func newCmdKernelAction(f *Factory, action string) *cobra.Command {
	o := &kernelActionOptions{}
	cmd := &cobra.Command{
		Use:   action + " [NOTEBOOK|KERNEL_ID...]",
		Short: fmt.Sprintf("%s kernels through their Jupyter server", strings.ToUpper(action[:1])+action[1:]),
		Long: fmt.Sprintf(`%s the kernels named by notebook (its path, or its file name when that is
unique) or kernel id (or a unique prefix), through the Jupyter server's REST API
with the server's token.

--idle-longer-than D and --holding-gpu select kernels instead (or narrow the ones
named): then the selection is listed, and acted on only with --yes.`, strings.ToUpper(action[:1])+action[1:]),
		Example: fmt.Sprintf(`  vramguard kernels %[1]s analysis.ipynb
  vramguard kernels %[1]s 3f2a9c1e
  vramguard kernels %[1]s --idle-longer-than 1h --holding-gpu
  vramguard kernels %[1]s --idle-longer-than 1h --holding-gpu --yes`, action),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKernelAction(cmd.Context(), f, o, action, args, cmd.Flags().Changed("idle-longer-than"))
		},
	}
	addKernelsFlags(cmd, &o.KernelsOptions)
	fl := cmd.Flags()
	fl.DurationVar(&o.IdleLongerThan, "idle-longer-than", 0, "select kernels idle for longer than D (e.g. 2h)")
	fl.BoolVar(&o.HoldingGPU, "holding-gpu", false, "select kernels that hold GPU memory")
	fl.BoolVar(&o.Yes, "yes", false, "act on a selection without listing it first")
	fl.BoolVar(&o.JSON, "json", false, "print what was (or would be) done as JSON")
	fl.StringVar(&o.Agent, "agent", "auto", "act through a machine-wide agent (serve --shared), which acts on the caller's own kernels only unless root or its --admin-group: auto (its socket under "+probe.SharedDirDefault+" when one runs), none, or its API socket")
	return cmd
}

// kernelActionResult is one line of an action's --json output.
type kernelActionResult struct {
	Action   string  `json:"action"`
	Notebook string  `json:"notebook"`
	KernelID string  `json:"kernel_id"`
	PID      int     `json:"pid"`
	GPUBytes uint64  `json:"gpu_bytes"`
	IdleS    float64 `json:"idle_s"`
	Done     bool    `json:"done"`
	Error    string  `json:"error,omitempty"`
}

func runKernelAction(ctx context.Context, f *Factory, o *kernelActionOptions, action string, args []string, idleSet bool) error {
	selecting := idleSet || o.HoldingGPU
	if len(args) == 0 && !selecting {
		return Usagef("name a notebook or kernel id, or select with --idle-longer-than D and/or --holding-gpu")
	}
	if idleSet && o.IdleLongerThan < 0 {
		return Usagef("--idle-longer-than must not be negative")
	}
	entries, err := kernelsFromAgent(ctx, f, &o.KernelsOptions, o.Agent)
	viaAgent := err == nil && entries != nil
	if err == nil && entries == nil {
		entries, err = collectKernels(ctx, f, &o.KernelsOptions)
	}
	if err != nil {
		return err
	}
	act := func(e *jupyter.Entry, timeout time.Duration) error { return jupyter.Act(ctx, e, action, timeout) }
	if viaAgent {
		sock, _ := agentSocket(o.Agent, f.Getenv)
		act = func(e *jupyter.Entry, timeout time.Duration) error {
			return postAgent(ctx, agentClient(sock, timeout+5*time.Second), "/api/v1/kernels/"+url.PathEscape(e.KernelID)+"/"+action)
		}
	}
	targets := entries
	if len(args) > 0 {
		targets = nil
		for _, a := range args {
			e, err := matchKernel(entries, a)
			if err != nil {
				return err
			}
			targets = append(targets, e)
		}
	}
	var sel []jupyter.Entry
	for _, e := range targets {
		if idleSet && e.IdleS <= o.IdleLongerThan.Seconds() {
			continue
		}
		if o.HoldingGPU && e.GPUBytes == 0 {
			continue
		}
		sel = append(sel, e)
	}
	results := make([]kernelActionResult, 0, len(sel))
	for _, e := range sel {
		results = append(results, kernelActionResult{Action: action, Notebook: e.Notebook, KernelID: e.KernelID, PID: e.PID, GPUBytes: e.GPUBytes, IdleS: e.IdleS})
	}
	if len(sel) == 0 {
		if o.JSON {
			return f.WriteJSON(results)
		}
		fmt.Fprintln(f.IO.ErrOut, "vramguard: no kernel matches")
		return nil
	}
	if selecting && !o.Yes {
		if o.JSON {
			return f.WriteJSON(results)
		}
		fmt.Fprintf(f.IO.Out, "would %s:\n", action)
		tw := tabwriter.NewWriter(f.IO.Out, 0, 0, 2, ' ', 0)
		for _, r := range results {
			fmt.Fprintf(tw, "  %s\tkernel %s\tpid %d\tGPU %s\tidle %s\n", orNone(r.Notebook), shortKernel(r.KernelID), r.PID, units.FormatBytes(r.GPUBytes), humanDur(r.IdleS))
		}
		tw.Flush()
		if !f.IO.IsTTY || !confirm(f, fmt.Sprintf("%s %s? [y/N] ", action, units.Plural(len(results), "kernel"))) {
			fmt.Fprintln(f.IO.ErrOut, "vramguard: nothing done; add --yes to do it")
			return nil
		}
	}
	failed := 0
	for i := range sel {
		timeout := max(o.Timeout, time.Minute) // a restart waits for the new kernel
		err := act(&sel[i], timeout)
		if err != nil {
			failed++
			results[i].Error = err.Error()
			if !o.JSON {
				fmt.Fprintf(f.IO.ErrOut, "vramguard: %s %s: %v\n", action, orNone(sel[i].Notebook), err)
			}
			continue
		}
		results[i].Done = true
		if !o.JSON {
			fmt.Fprintf(f.IO.Out, "%s %s (kernel %s)\n", actionPast[action], orNone(sel[i].Notebook), shortKernel(sel[i].KernelID))
		}
	}
	if o.JSON {
		if err := f.WriteJSON(results); err != nil {
			return err
		}
	}
	if failed > 0 {
		return Silent(ExitFailed)
	}
	return nil
}

// orNone is a notebook as the terminal shows it (termsafe.Line), or "(no
// notebook)".
func orNone(nb string) string {
	if nb == "" {
		return "(no notebook)"
	}
	return termsafe.Line(nb)
}

func confirm(f *Factory, prompt string) bool {
	fmt.Fprint(f.IO.ErrOut, prompt)
	line, _ := bufio.NewReader(f.IO.In).ReadString('\n')
	line = strings.ToLower(strings.TrimSpace(line))
	return line == "y" || line == "yes"
}

// matchKernel finds the one kernel a user named: a kernel id or unique
// prefix of one, a notebook's absolute path, its path as the server knows
// it, or its file name when no other notebook has it.
func matchKernel(es []jupyter.Entry, ref string) (jupyter.Entry, error) {
	abs := ref
	if !filepath.IsAbs(ref) {
		if wd, err := os.Getwd(); err == nil {
			abs = filepath.Join(wd, ref)
		}
	}
	tiers := []func(e jupyter.Entry) bool{
		func(e jupyter.Entry) bool { return e.KernelID == ref },
		func(e jupyter.Entry) bool { return e.Notebook != "" && (e.Notebook == ref || e.Notebook == abs) },
		func(e jupyter.Entry) bool { return e.Path != "" && e.Path == ref },
		func(e jupyter.Entry) bool { return strings.HasPrefix(e.KernelID, ref) },
		func(e jupyter.Entry) bool { return e.Notebook != "" && filepath.Base(e.Notebook) == ref },
	}
	for _, match := range tiers {
		var found []jupyter.Entry
		for _, e := range es {
			if match(e) {
				found = append(found, e)
			}
		}
		switch len(found) {
		case 0:
			continue
		case 1:
			return found[0], nil
		default:
			var names []string
			for _, e := range found {
				names = append(names, orNone(e.Notebook)+" ("+shortKernel(e.KernelID)+")")
			}
			return jupyter.Entry{}, Usagef("%q matches %d kernels: %s; give the kernel id", ref, len(found), strings.Join(names, ", "))
		}
	}
	return jupyter.Entry{}, Failf("no running kernel matches %q (see 'vramguard kernels')", ref)
}
