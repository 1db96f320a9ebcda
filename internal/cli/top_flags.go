package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/backends"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/sampler"
)

// gpuOptions are the flags every sampling command shares.
type gpuOptions struct {
	// Simulate is a scenario file played instead of real GPUs.
	Simulate string
	// Backend is auto, nvml, none or sim:PATH (--gpu-backend).
	Backend string
	// ProcRoot is the directory holding proc/ (and sys/); "" is "/".
	ProcRoot string
}

// addGPUFlags adds --simulate SCENARIO to a command that samples GPUs, so it
// runs on a machine without a GPU. Pass the result to openGPU.
func addGPUFlags(cmd *cobra.Command, simulate *string) {
	cmd.Flags().StringVar(simulate, "simulate", "", "play a GPU scenario file instead of real GPUs (see examples/scenarios/)")
}

// addFlags adds the flags of a command that watches the machine:
// --simulate, --gpu-backend and the hidden --proc-root.
func (o *gpuOptions) addFlags(cmd *cobra.Command) {
	addGPUFlags(cmd, &o.Simulate)
	fl := cmd.Flags()
	fl.StringVar(&o.Backend, "gpu-backend", "auto", "GPU backend: auto, nvml, none or sim:PATH")
	fl.StringVar(&o.ProcRoot, "proc-root", "", "directory holding proc/ and sys/ (for fixture trees)")
	_ = fl.MarkHidden("proc-root")
}

// openGPU opens the backend chosen by simulate (if set) or spec ("" = auto),
// mapping failures to exit codes: a bad spec or scenario is usage (2), a
// missing driver where nvml was asked for is environment (3). Under auto, a
// missing driver is not an error: the returned note says it plainly.
func openGPU(ctx context.Context, simulate, spec string) (b gpu.Backend, note string, err error) {
	if simulate != "" {
		if spec != "" && spec != "auto" {
			return nil, "", Usagef("--simulate and --gpu-backend %s cannot be used together", spec)
		}
		spec = "sim:" + simulate
	}
	b, err = backends.Open(ctx, spec)
	switch {
	case errors.Is(err, backends.ErrSpec):
		return nil, "", Usagef("%v", err)
	case errors.Is(err, gpu.ErrNoDriver):
		return nil, "", Envf("%v", err)
	case err != nil:
		return nil, "", Envf("open GPU backend: %v", err)
	}
	if r := backends.Reason(b); r != "" {
		note = r
		if spec == "" || spec == "auto" {
			note += "; showing no GPUs (try --simulate examples/scenarios/workstation.json)"
		}
	}
	return b, note, nil
}

// procSource is where attribution reads processes: the /proc under root,
// with a simulated backend's made-up processes laid over it.
// machineSampler is the sampler configuration top and serve watch a
// machine with: b's processes read through src (procSource of procRoot)
// and attributed with hints (which process is which run) and the pod logs
// under procRoot, each process's environment read under procRoot; and,
// when procRoot is this machine's own /proc, hints' supervised runs in
// progress as jobs whether or not they hold GPU memory. The caller adds
// its intervals and the rest.
func machineSampler(b gpu.Backend, src attrib.ProcSource, procRoot string, hints *runctl.Hints, now func() time.Time) sampler.Config {
	cfg := sampler.Config{
		Backend:    b,
		Attributor: &attrib.Attributor{Src: src, Hints: hints, Pods: attrib.NewPodIndex(attrib.PodLogDir(procRoot))},
		Now:        now,
		Environ:    procfs.FS{Root: procRoot}.Environ,
	}
	if procRoot == "" {
		// supervised runs are jobs of this machine, on a GPU or not
		cfg.Runs = hints
	}
	return cfg
}

func procSource(b gpu.Backend, root string) attrib.ProcSource {
	fs := procfs.FS{Root: root}
	if s, ok := b.(*sim.Backend); ok {
		return s.Host(fs)
	}
	return fs
}
