package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/supervise"
)

// Shell completion (`vramguard completion bash|zsh|fish|powershell`
// prints the script) completes what vramguard knows: RUN arguments from
// the run store, kernel ids and notebooks from the running Jupyter
// servers, and the values of flags that take one of a few words.

// maxCompletedRuns bounds how many runs a RUN completion offers.
const maxCompletedRuns = 200

// flagValues are flags that take one of a few words, by command path and
// flag name ("*" for every command that has the flag).
var flagValues = map[string]map[string][]string{
	"vramguard run":         {"restart": {supervise.RestartNever, supervise.RestartOnFailure, supervise.RestartAlways}},
	"vramguard top":         {"sort": sortKeys},
	"vramguard runs export": {"format": {"csv", "json"}},
	"vramguard logs":        {"stream": {"stdout", "stderr"}},
}

// runArgs are the commands whose one argument is a RUN; running says
// whether only running runs make sense there.
var runArgs = map[string]bool{
	"vramguard explain":     false,
	"vramguard logs":        false,
	"vramguard analyze":     false,
	"vramguard runs export": false,
	"vramguard stop":        true,
	"vramguard restart":     true,
}

// kernelArgs are the commands whose arguments are kernels.
var kernelArgs = []string{"vramguard kernels interrupt", "vramguard kernels restart", "vramguard kernels shutdown"}

// registerCompletions wires every completion into the command tree.
func registerCompletions(f *Factory, root *cobra.Command) {
	walkCommands(root, func(c *cobra.Command) {
		path := c.CommandPath()
		if running, ok := runArgs[path]; ok && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeRuns(f, running)
		}
		for _, k := range kernelArgs {
			if path == k && c.ValidArgsFunction == nil {
				c.ValidArgsFunction = completeKernels(f)
			}
		}
		for name, words := range flagValues[path] {
			mustRegister(c, name, completeWords(words))
		}
		if c.Flags().Lookup("gpu-backend") != nil {
			mustRegister(c, "gpu-backend", completeGPUBackend)
		}
		if c.Flags().Lookup("simulate") != nil {
			mustRegister(c, "simulate", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				return []string{"json"}, cobra.ShellCompDirectiveFilterFileExt
			})
		}
	})
}

// walkCommands calls fn for cmd and every command below it.
func walkCommands(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, c := range cmd.Commands() {
		walkCommands(c, fn)
	}
}

// mustRegister registers a flag's completion; a flag that does not exist
// is a mistake in the tables above, which TestCompletion catches.
func mustRegister(c *cobra.Command, name string, fn cobra.CompletionFunc) {
	if err := c.RegisterFlagCompletionFunc(name, fn); err != nil {
		panic(fmt.Sprintf("complete %s --%s: %v", c.CommandPath(), name, err))
	}
}

func completeWords(words []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, w := range words {
			if strings.HasPrefix(w, toComplete) {
				out = append(out, w)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeGPUBackend offers auto, nvml, none and sim:, then after sim: the
// scenario files (*.json) and directories under what was typed.
func completeGPUBackend(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if rest, ok := strings.CutPrefix(toComplete, "sim:"); ok {
		matches, _ := filepath.Glob(rest + "*")
		var out []string
		for _, m := range matches {
			st, err := os.Stat(m)
			switch {
			case err != nil:
			case st.IsDir():
				out = append(out, "sim:"+m+"/")
			case strings.HasSuffix(m, ".json"):
				out = append(out, "sim:"+m)
			}
		}
		return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	words := []string{"auto\tNVML when the driver loads, else none", "nvml\tthe NVIDIA driver, or fail",
		"none\tno GPUs", "sim:\ta scenario file: sim:PATH"}
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, toComplete) {
			out = append(out, w)
		}
	}
	dir := cobra.ShellCompDirectiveNoFileComp
	if len(out) == 1 && strings.HasPrefix(out[0], "sim:") {
		dir |= cobra.ShellCompDirectiveNoSpace // the path follows
	}
	return out, dir
}

// completeRuns offers run ids, names and "last" for a command's one RUN
// argument (running runs only when running is set), newest first, each
// with what it is. It never creates the store.
func completeRuns(f *Factory, running bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := f.openStoreRead(ctx)
		if err != nil {
			return nil, noRunsDirective(cmd)
		}
		defer st.Close()
		runs, err := st.Runs(ctx, maxCompletedRuns)
		if err != nil {
			return nil, noRunsDirective(cmd)
		}
		now := f.Now()
		var ids, names []string
		named := map[string]bool{}
		for _, r := range runs {
			if running && r.Status != store.StatusRunning {
				continue
			}
			status := r.Status
			if r.Status == store.StatusFinished {
				status = dash(r.Reason)
			}
			desc := fmt.Sprintf("%s, %s", status, ago(now, r.StartedAt))
			if strings.HasPrefix(r.ID, toComplete) {
				d := desc
				if r.Name != "" {
					d = r.Name + ": " + desc
				}
				ids = append(ids, r.ID+"\t"+d)
			}
			// A name finds its newest run, the first one listed.
			if r.Name != "" && !named[r.Name] && strings.HasPrefix(r.Name, toComplete) {
				named[r.Name] = true
				names = append(names, r.Name+"\t"+r.ID+": "+desc)
			}
		}
		out := append(names, ids...)
		if len(runs) > 0 && !running && strings.HasPrefix("last", toComplete) {
			out = append(out, "last\tthe newest run, "+runs[0].ID)
		}
		if len(out) == 0 {
			return nil, noRunsDirective(cmd)
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
	}
}

// noRunsDirective: analyze also takes a trace file, so without a run to
// offer it completes file names.
func noRunsDirective(cmd *cobra.Command) cobra.ShellCompDirective {
	if cmd.Name() == "analyze" {
		return cobra.ShellCompDirectiveDefault
	}
	return cobra.ShellCompDirectiveNoFileComp
}

// completeKernels offers the kernels of the running Jupyter servers (those
// the command's --runtime-dir names, or the usual ones): each kernel's id
// and its notebook's file name when that is unique, as the actions accept.
func completeKernels(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		o := &KernelsOptions{GPUBackend: "none", Timeout: 2 * time.Second}
		o.RuntimeDirs, _ = cmd.Flags().GetStringArray("runtime-dir")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Quietly: a shell completing must not print warnings.
		q := *f
		q.IO.ErrOut = discardNotify{}
		entries, err := collectKernels(ctx, &q, o)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		given := map[string]bool{}
		for _, a := range args {
			given[a] = true
		}
		base := map[string]int{}
		for _, e := range entries {
			if e.Notebook != "" {
				base[filepath.Base(e.Notebook)]++
			}
		}
		var out []string
		for _, e := range entries {
			nb := orNone(e.Notebook)
			if strings.HasPrefix(e.KernelID, toComplete) && !given[e.KernelID] {
				out = append(out, fmt.Sprintf("%s\t%s, %s", e.KernelID, nb, e.ExecutionState))
			}
			if b := filepath.Base(e.Notebook); e.Notebook != "" && base[b] == 1 && strings.HasPrefix(b, toComplete) && !given[b] {
				out = append(out, fmt.Sprintf("%s\tkernel %s, %s", b, shortKernel(e.KernelID), e.ExecutionState))
			}
		}
		sort.Strings(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
