package doctor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/vramguard/vramguard/internal/gpu"
)

// GPU is what doctor needs from the NVIDIA driver. Snapshot returns an error
// wrapping gpu.ErrNoDriver when NVML cannot be loaded; the GPU checks then
// report n/a. Any other error means NVML loaded but did not answer, which is
// itself a failure (a driver/library version mismatch, most often).
type GPU interface {
	Snapshot(ctx context.Context) (GPUSnapshot, error)
}

// GPUSnapshot is the driver's view at one moment.
type GPUSnapshot struct {
	DriverVersion string `json:"driver_version"`
	// CUDADriverVersion is the highest CUDA version the driver supports,
	// encoded as NVML does: 1000*major + 10*minor (12040 is 12.4); 0 unknown.
	CUDADriverVersion int          `json:"cuda_driver_version"`
	Devices           []GPUDevice  `json:"devices"`
	Processes         []GPUProcess `json:"processes"`
}

// GPUDevice is one GPU.
type GPUDevice struct {
	Index      int    `json:"index"`
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	PCIBusID   string `json:"pci_bus_id,omitempty"` // "0000:3b:00.0"; "" unknown
	TotalBytes uint64 `json:"total_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	// Persistence is the persistence mode; nil when the driver does not say.
	Persistence *bool `json:"persistence,omitempty"`
}

// GPUProcess is one process holding memory on one GPU; PID is as NVML sees
// it, which is the host's PID namespace.
type GPUProcess struct {
	PID         int    `json:"pid"`
	DeviceIndex int    `json:"device_index"`
	UsedBytes   uint64 `json:"used_bytes"`
}

// CUDAVersionString turns NVML's 12040 into "12.4".
func CUDAVersionString(v int) string {
	if v <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

// NoNVML is the GPU source of a build or machine without an NVML backend.
// It always reports gpu.ErrNoDriver, and says where libnvidia-ml was seen if
// a file exists, so a machine with a driver is not mistaken for one without.
type NoNVML struct{ Root string }

// nvmlDirs are where distributions and the NVIDIA installer put the library.
var nvmlDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/aarch64-linux-gnu",
	"/usr/local/nvidia/lib64", "/usr/lib/wsl/lib",
}

// Snapshot implements GPU.
func (n NoNVML) Snapshot(context.Context) (GPUSnapshot, error) {
	for _, d := range nvmlDirs {
		p := filepath.Join(d, "libnvidia-ml.so.1")
		if (&Env{Root: n.Root}).exists(p) {
			return GPUSnapshot{}, fmt.Errorf("%s exists but this vramguard has no NVML backend: %w", p, gpu.ErrNoDriver)
		}
	}
	return GPUSnapshot{}, gpu.ErrNoDriver
}

// BackendGPU adapts a gpu.Backend (devices and processes). Driver version,
// CUDA version and persistence come from Info when it is set, since the
// Backend contract does not carry them.
type BackendGPU struct {
	Backend gpu.Backend
	Info    func(ctx context.Context) (driver string, cudaVersion int, persistence map[int]bool, err error)
}

// Snapshot implements GPU.
func (b BackendGPU) Snapshot(ctx context.Context) (GPUSnapshot, error) {
	var s GPUSnapshot
	devs, err := b.Backend.Devices(ctx)
	if err != nil {
		return s, fmt.Errorf("%s backend: devices: %w", b.Backend.Name(), err)
	}
	procs, err := b.Backend.Processes(ctx)
	if err != nil {
		return s, fmt.Errorf("%s backend: processes: %w", b.Backend.Name(), err)
	}
	var pers map[int]bool
	if b.Info != nil {
		if s.DriverVersion, s.CUDADriverVersion, pers, err = b.Info(ctx); err != nil {
			return s, err
		}
	}
	for _, d := range devs {
		gd := GPUDevice{Index: d.Index, UUID: d.UUID, Name: d.Name, TotalBytes: d.TotalBytes, UsedBytes: d.UsedBytes}
		if p, ok := pers[d.Index]; ok {
			gd.Persistence = &p
		}
		s.Devices = append(s.Devices, gd)
	}
	for _, p := range procs {
		s.Processes = append(s.Processes, GPUProcess{PID: p.PID, DeviceIndex: p.DeviceIndex, UsedBytes: p.UsedBytes})
	}
	return s, nil
}

// StaticGPU returns a fixed snapshot or error (fixtures, tests).
type StaticGPU struct {
	Snap GPUSnapshot
	Err  error
}

// Snapshot implements GPU.
func (s StaticGPU) Snapshot(context.Context) (GPUSnapshot, error) { return s.Snap, s.Err }

func noDriver(err error) bool { return errors.Is(err, gpu.ErrNoDriver) }
