package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/backends"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
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
func procSource(b gpu.Backend, root string) attrib.ProcSource {
	fs := procfs.FS{Root: root}
	if s, ok := b.(*sim.Backend); ok {
		return s.Host(fs)
	}
	return fs
}
