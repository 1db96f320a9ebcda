//go:build cgo

// Package nvml is the gpu.Backend for NVIDIA GPUs, through NVML
// (github.com/NVIDIA/go-nvml). go-nvml dlopens libnvidia-ml.so.1 at Init, so a
// binary built with this package starts on a machine without the driver;
// Open then returns gpu.ErrNoDriver. It never initialises CUDA.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vramguard/vramguard/internal/gpu"
)

// notAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned 64-bit memory value.
const notAvailable = ^uint64(0)

// Backend reads GPUs through an NVML library. Every driver call is made with
// mu held: the caches below need it, and NVML's process queries take a
// driver-wide lock anyway.
type Backend struct {
	lib gonvml.Interface

	mu     sync.Mutex
	closed bool
	noV2   bool        // the driver lacks nvmlDeviceGetMemoryInfo_v2
	drops  gpu.DropLog // Dropped: what the latest Processes dropped
	// lastSeen is, per device UUID, the newest per-process utilisation
	// sample timestamp (µs) already read, so each call asks NVML only for
	// newer samples; util keeps the latest sample per PID.
	lastSeen map[string]uint64
	util     map[string]map[uint32]gonvml.ProcessUtilizationSample
}

// Open loads the system's NVML library. Without the driver it returns an
// error wrapping gpu.ErrNoDriver.
func Open() (*Backend, error) { return New(gonvml.New()) }

// New initialises lib (the real library, or go-nvml's mock in tests).
func New(lib gonvml.Interface) (*Backend, error) {
	switch ret := lib.Init(); ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, gpu.ErrNoDriver
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w: the NVIDIA kernel driver is not loaded", gpu.ErrNoDriver)
	default:
		return nil, fmt.Errorf("initialise NVML: %v", ret)
	}
	return &Backend{
		lib:      lib,
		lastSeen: map[string]uint64{},
		util:     map[string]map[uint32]gonvml.ProcessUtilizationSample{},
	}, nil
}

func (b *Backend) Name() string { return "nvml" }

// DriverVersion returns the driver's version string, "" when unknown.
func (b *Backend) DriverVersion() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ""
	}
	v, ret := b.lib.SystemGetDriverVersion()
	if ret != gonvml.SUCCESS {
		return ""
	}
	return v
}

// handle is a device handle with what we know of it.
type handle struct {
	h   gonvml.Device
	dev gpu.Device
	// hasMIG is set on a GPU whose memory and processes are reported by its
	// MIG instances instead.
	hasMIG bool
}

func (b *Backend) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed {
		return gpu.ErrClosed
	}
	return nil
}

// handles enumerates GPUs and, where MIG is on, their MIG instances; with
// b.mu held. It fails with ctx's error once ctx is done and with
// gpu.ErrClosed after Close.
func (b *Backend) handles(ctx context.Context) ([]handle, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	n, ret := b.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %v", ret)
	}
	var out []handle
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d: %v", i, ret)
		}
		d, err := b.readDevice(h)
		if err != nil {
			return nil, fmt.Errorf("nvml device %d: %w", i, err)
		}
		d.Index = i
		parent := handle{h: h, dev: d}
		cur, _, ret := h.GetMigMode()
		if ret != gonvml.SUCCESS || cur != gonvml.DEVICE_MIG_ENABLE {
			out = append(out, parent)
			continue
		}
		parent.hasMIG = true
		out = append(out, parent)
		max, ret := h.GetMaxMigDeviceCount()
		if ret != gonvml.SUCCESS {
			continue
		}
		for j := 0; j < max; j++ {
			mh, ret := h.GetMigDeviceHandleByIndex(j)
			if ret == gonvml.ERROR_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
				continue // an empty MIG slot
			}
			if ret != gonvml.SUCCESS {
				return nil, fmt.Errorf("nvml device %d MIG %d: %v", i, j, ret)
			}
			md, err := b.readDevice(mh)
			if err != nil {
				return nil, fmt.Errorf("nvml device %d MIG %d: %w", i, j, err)
			}
			md.Index, md.ParentUUID, md.MIGIndex = i, d.UUID, j
			out = append(out, handle{h: mh, dev: md})
		}
	}
	return out, nil
}

func (b *Backend) readDevice(h gonvml.Device) (gpu.Device, error) {
	var d gpu.Device
	var ret gonvml.Return
	if d.UUID, ret = h.GetUUID(); ret != gonvml.SUCCESS {
		return d, fmt.Errorf("uuid: %v", ret)
	}
	if d.Name, ret = h.GetName(); ret != gonvml.SUCCESS {
		d.Name = "unknown"
	}
	if err := b.readMemory(h, &d); err != nil {
		return d, err
	}
	d.UtilPercent = -1
	if u, ret := h.GetUtilizationRates(); ret == gonvml.SUCCESS {
		d.UtilPercent = int(u.Gpu)
	}
	return d, nil
}

// readMemory prefers nvmlDeviceGetMemoryInfo_v2, whose Used leaves out the
// driver's reserved memory (the v1 call counts it as used, so an idle GPU
// looks a few hundred MiB full), and falls back to v1 on older drivers.
func (b *Backend) readMemory(h gonvml.Device, d *gpu.Device) error {
	if !b.noV2 {
		m, ret := h.GetMemoryInfo_v2()
		switch ret {
		case gonvml.SUCCESS:
			d.TotalBytes, d.UsedBytes, d.FreeBytes, d.ReservedBytes = m.Total, m.Used, m.Free, m.Reserved
			return nil
		case gonvml.ERROR_FUNCTION_NOT_FOUND, gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			b.noV2 = true
		default:
			return fmt.Errorf("memory info: %v", ret)
		}
	}
	m, ret := h.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("memory info: %v", ret)
	}
	d.TotalBytes, d.UsedBytes, d.FreeBytes = m.Total, m.Used, m.Free
	return nil
}

// Devices implements gpu.Backend.
func (b *Backend) Devices(ctx context.Context) ([]gpu.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hs, err := b.handles(ctx)
	if err != nil {
		return nil, err
	}
	return devicesOf(hs), nil
}

// devicesOf is the devices of hs, in their order.
func devicesOf(hs []handle) []gpu.Device {
	out := make([]gpu.Device, len(hs))
	for i, h := range hs {
		out[i] = h.dev
	}
	return out
}

// Processes implements gpu.Backend: compute and graphics processes of every
// device (of every MIG instance where MIG is on), with per-process SM
// utilisation where the driver samples it.
func (b *Backend) Processes(ctx context.Context) ([]gpu.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hs, err := b.handles(ctx)
	if err != nil {
		return nil, err
	}
	devs := devicesOf(hs)
	var raw []gpu.Process
	for _, h := range hs {
		if h.hasMIG {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ps, err := b.deviceProcesses(h)
		if err != nil {
			return nil, fmt.Errorf("nvml device %d (%s): %w", h.dev.Index, h.dev.UUID, err)
		}
		raw = append(raw, ps...)
	}
	kept, dropped := gpu.Sanitize(devs, raw)
	b.drops.Set(dropped)
	pos := make(map[string]int, len(devs))
	for i, d := range devs {
		pos[d.UUID] = i
	}
	sort.SliceStable(kept, func(i, j int) bool {
		if pi, pj := pos[kept[i].DeviceUUID], pos[kept[j].DeviceUUID]; pi != pj {
			return pi < pj
		}
		return kept[i].PID < kept[j].PID
	})
	return kept, nil
}

func (b *Backend) deviceProcesses(h handle) ([]gpu.Process, error) {
	byPID := map[uint32]*gpu.Process{}
	var order []uint32
	for _, get := range []func() ([]gonvml.ProcessInfo, gonvml.Return){
		h.h.GetComputeRunningProcesses, h.h.GetGraphicsRunningProcesses,
	} {
		infos, ret := get()
		if ret == gonvml.ERROR_NOT_SUPPORTED {
			continue
		}
		if ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("running processes: %v", ret)
		}
		for _, in := range infos {
			p, ok := byPID[in.Pid]
			if !ok {
				p = &gpu.Process{PID: int(in.Pid), DeviceIndex: h.dev.Index, DeviceUUID: h.dev.UUID, SMUtilPercent: -1}
				byPID[in.Pid] = p
				order = append(order, in.Pid)
			}
			// A process with both a compute and a graphics context is
			// listed twice with the same memory; keep the larger figure.
			if in.UsedGpuMemory == notAvailable {
				if p.UsedBytes == 0 {
					p.MemoryUnknown = true
				}
				continue
			}
			p.MemoryUnknown = false
			p.UsedBytes = max(p.UsedBytes, in.UsedGpuMemory)
		}
	}
	samples := b.processUtil(h)
	out := make([]gpu.Process, 0, len(order))
	for _, pid := range order {
		p := byPID[pid]
		if s, ok := samples[pid]; ok {
			p.SMUtilPercent = int(s.SmUtil)
			p.LastSeen = time.UnixMicro(int64(s.TimeStamp))
		}
		out = append(out, *p)
	}
	return out, nil
}

// processUtil reads per-process utilisation samples newer than the last one
// seen on this device and returns the latest sample per PID. A device that
// does not sample (MIG instances, older GPUs) returns nothing.
func (b *Backend) processUtil(h handle) map[uint32]gonvml.ProcessUtilizationSample {
	cache := b.util[h.dev.UUID]
	if cache == nil {
		cache = map[uint32]gonvml.ProcessUtilizationSample{}
		b.util[h.dev.UUID] = cache
	}
	samples, ret := h.h.GetProcessUtilization(b.lastSeen[h.dev.UUID])
	if ret != gonvml.SUCCESS {
		// ERROR_NOT_FOUND: no sample newer than lastSeen; keep the cache.
		return cache
	}
	for _, s := range samples {
		if s.TimeStamp > b.lastSeen[h.dev.UUID] {
			b.lastSeen[h.dev.UUID] = s.TimeStamp
		}
		if old, ok := cache[s.Pid]; !ok || s.TimeStamp >= old.TimeStamp {
			cache[s.Pid] = s
		}
	}
	return cache
}

// Dropped implements gpu.Dropper.
func (b *Backend) Dropped() gpu.DropCounts { return b.drops.Dropped() }

// Close shuts NVML down. A second Close returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if ret := b.lib.Shutdown(); ret != gonvml.SUCCESS && ret != gonvml.ERROR_UNINITIALIZED {
		return fmt.Errorf("nvml shutdown: %v", ret)
	}
	return nil
}

// IsNoDriver reports whether err means the NVIDIA driver is missing.
func IsNoDriver(err error) bool { return errors.Is(err, gpu.ErrNoDriver) }
