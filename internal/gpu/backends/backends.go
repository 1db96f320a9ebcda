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

// fileError is a sim:PATH whose file cannot be used: it reads as what is
// wrong with the file and is an ErrSpec for callers.
type fileError struct{ err error }

func (e fileError) Error() string        { return e.err.Error() }
func (e fileError) Unwrap() error        { return e.err }
func (e fileError) Is(target error) bool { return target == ErrSpec }

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
			// The scenario file is at fault, not the spec's syntax: its
			// error alone, still a usage error.
			return nil, fileError{err}
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
