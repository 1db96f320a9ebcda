package doctor

import (
	"context"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/gpu/nvml"
)

// NVML is doctor's GPU source on a live machine: the NVML backend of
// internal/gpu/nvml, opened for one snapshot and closed again. Without the
// driver (or in a build without cgo) Snapshot returns gpu.ErrNoDriver and
// the GPU checks report n/a.
type NVML struct{}

// The nvml backend reports devices, processes and the driver version. The
// highest CUDA version, persistence mode and PCI bus IDs are read through
// these optional methods when the backend grows them; until then the CUDA
// version is derived from the driver version and the rest is "unknown".
type (
	driverVersioner interface{ DriverVersion() string }
	cudaVersioner   interface{ CUDADriverVersion() (int, error) }
	persistencer    interface {
		PersistenceMode(ctx context.Context, index int) (bool, error)
	}
	busIDer interface {
		PCIBusID(ctx context.Context, index int) (string, error)
	}
)

// Snapshot implements GPU.
func (NVML) Snapshot(ctx context.Context) (GPUSnapshot, error) {
	b, err := nvml.Open()
	if err != nil {
		return GPUSnapshot{}, err
	}
	defer b.Close()
	var be any = b
	info := func(context.Context) (string, int, map[int]bool, error) {
		driver := ""
		if d, ok := be.(driverVersioner); ok {
			driver = d.DriverVersion()
		}
		cuda := 0
		if c, ok := be.(cudaVersioner); ok {
			if v, err := c.CUDADriverVersion(); err == nil {
				cuda = v
			}
		}
		if cuda == 0 {
			cuda = CUDAForDriver(driver)
		}
		return driver, cuda, nil, nil
	}
	snap, err := BackendGPU{Backend: b, Info: info}.Snapshot(ctx)
	if err != nil {
		return snap, err
	}
	for i := range snap.Devices {
		d := &snap.Devices[i]
		if p, ok := be.(persistencer); ok {
			if on, err := p.PersistenceMode(ctx, d.Index); err == nil {
				d.Persistence = &on
			}
		}
		if p, ok := be.(busIDer); ok {
			if id, err := p.PCIBusID(ctx, d.Index); err == nil {
				d.PCIBusID = id
			}
		}
	}
	return snap, nil
}

// cudaMinDriver is, per CUDA release, the oldest Linux driver that runs it
// (NVIDIA's CUDA Toolkit release notes, table 3), newest first.
var cudaMinDriver = []struct {
	cuda   int
	driver [3]int
}{
	{13000, [3]int{580, 65, 6}},
	{12090, [3]int{575, 51, 3}},
	{12080, [3]int{570, 26, 0}},
	{12060, [3]int{560, 28, 3}},
	{12050, [3]int{555, 42, 2}},
	{12040, [3]int{550, 54, 14}},
	{12030, [3]int{545, 23, 6}},
	{12020, [3]int{535, 54, 3}},
	{12010, [3]int{530, 30, 2}},
	{12000, [3]int{525, 60, 13}},
	{11080, [3]int{520, 61, 5}},
	{11070, [3]int{515, 43, 4}},
	{11060, [3]int{510, 39, 1}},
	{11050, [3]int{495, 29, 5}},
	{11040, [3]int{470, 42, 1}},
	{11030, [3]int{465, 19, 1}},
	{11020, [3]int{460, 27, 3}},
	{11010, [3]int{455, 23, 0}},
	{11000, [3]int{450, 36, 6}},
}

// CUDAForDriver derives the highest CUDA version a Linux driver supports
// from its version string ("550.54.15" gives 12040); 0 when unknown.
func CUDAForDriver(driver string) int {
	parts := strings.Split(driver, ".")
	var v [3]int
	for i := 0; i < len(parts) && i < 3; i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return 0
		}
		v[i] = n
	}
	if driver == "" {
		return 0
	}
	for _, c := range cudaMinDriver {
		if !less(v, c.driver) {
			return c.cuda
		}
	}
	return 0
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
