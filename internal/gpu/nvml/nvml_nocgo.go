//go:build !cgo

// Package nvml is the gpu.Backend for NVIDIA GPUs. This build has no cgo, so
// NVML cannot be loaded and Open always reports that no driver was found.
package nvml

import (
	"fmt"

	"github.com/vramguard/vramguard/internal/gpu"
)

// Backend is unavailable without cgo.
type Backend struct{ gpu.None }

// Open reports gpu.ErrNoDriver: this binary was built without cgo.
func Open() (*Backend, error) {
	return nil, fmt.Errorf("%w (this vramguard was built without cgo)", gpu.ErrNoDriver)
}
