// Package backends chooses a gpu.Backend from a flag value. It exists apart
// from package gpu so that gpu stays free of cgo and of the simulator.
package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/nvml"
	"github.com/vramguard/vramguard/internal/gpu/sim"
)

// ErrSpec is wrapped by errors about the spec string itself (bad usage).
var ErrSpec = errors.New("invalid GPU backend")

// Open returns the backend named by spec:
//
//	auto      NVML if the driver loads, otherwise none (a missing driver is
//	          not an error; the None's Reason says why)
//	nvml      NVML; an error wrapping gpu.ErrNoDriver without the driver
//	none      no GPUs
//	sim:PATH  the scenario file at PATH
//
// "" means auto.
func Open(ctx context.Context, spec string) (gpu.Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case spec == "" || spec == "auto":
		b, err := nvml.Open()
		if err != nil {
			return gpu.None{Reason: err.Error()}, nil
		}
		return b, nil
	case spec == "nvml":
		b, err := nvml.Open()
		if err != nil {
			return nil, err
		}
		return b, nil
	case spec == "none":
		return gpu.None{Reason: "GPU backend \"none\" chosen"}, nil
	case strings.HasPrefix(spec, "sim:"):
		path := strings.TrimPrefix(spec, "sim:")
		if path == "" {
			return nil, fmt.Errorf("%w %q: sim needs a scenario file, as sim:PATH", ErrSpec, spec)
		}
		b, err := sim.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSpec, err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("%w %q: want auto, nvml, none or sim:PATH", ErrSpec, spec)
	}
}

// Reason says why b shows no GPUs, or "" when it is a real backend.
func Reason(b gpu.Backend) string {
	if n, ok := b.(gpu.None); ok {
		return n.Reason
	}
	return ""
}
