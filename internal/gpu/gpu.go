// Package gpu is the only place that knows how GPU devices and their processes
// are read. Everything else sees a Backend. It must never initialise CUDA and
// never block longer than one driver call.
//
// Implementations live in subpackages: nvml (the NVIDIA driver through
// go-nvml), sim (a scenario file, for tests and demos) and None here.
// backends.Open picks one from a flag value; gputest is the conformance
// suite every implementation runs.
package gpu

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNoDriver is returned by a backend whose driver library cannot be found.
var ErrNoDriver = errors.New("no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)")

// ErrClosed is returned by a backend used after Close.
var ErrClosed = errors.New("gpu backend is closed")

// Device is one GPU (or one MIG instance) as the driver reports it.
type Device struct {
	// Index is the driver's index of the physical GPU. A MIG instance
	// carries its parent's index and its own MIGIndex.
	Index      int    `json:"index"`
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	TotalBytes uint64 `json:"total_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
	// ReservedBytes is memory the driver keeps for itself (only reported by
	// drivers with nvmlDeviceGetMemoryInfo_v2); it is part of neither Used
	// nor Free.
	ReservedBytes uint64 `json:"reserved_bytes,omitempty"`
	// UtilPercent is the GPU (SM) utilisation over the driver's last sample
	// period, or -1 when the driver does not report it.
	UtilPercent int `json:"util_percent"`
	// ParentUUID is set on a MIG instance: the UUID of the GPU it lives on.
	ParentUUID string `json:"parent_uuid,omitempty"`
	// MIGIndex is the instance's index on its parent; meaningful only when
	// ParentUUID is set.
	MIGIndex int `json:"mig_index,omitempty"`
}

// IsMIG reports whether d is a MIG instance rather than a whole GPU.
func (d Device) IsMIG() bool { return d.ParentUUID != "" }

// Process is one process holding memory on one device. A process on two
// devices appears twice.
type Process struct {
	// PID is the host PID, as the driver reports it.
	PID         int    `json:"pid"`
	DeviceIndex int    `json:"device_index"`
	DeviceUUID  string `json:"device_uuid"`
	UsedBytes   uint64 `json:"used_bytes"`
	// MemoryUnknown is set when the driver would not say how much memory the
	// process holds (it reports "not available", e.g. without permission);
	// UsedBytes is then 0.
	MemoryUnknown bool `json:"memory_unknown,omitempty"`
	// SMUtilPercent is the process's SM utilisation, -1 when unknown.
	SMUtilPercent int `json:"sm_util_percent"`
	// LastSeen is the time of the driver's latest utilisation sample for
	// this process; zero when there is none.
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// Backend reads GPU state.
//
// Contract (checked for every implementation by package gputest):
//   - Devices and Processes are safe for concurrent use and return fresh
//     slices the caller may keep and modify.
//   - Devices reports every device in index order; a MIG instance follows
//     its parent GPU, in MIGIndex order. Used+Free never exceeds Total.
//   - Processes reports only processes on devices that Devices reports
//     (same Index and UUID), ordered by device then PID. It never returns a
//     scrambled record: PID 0, PID 0xFFFFFFFF (or any PID that does not fit a
//     Linux PID), or more memory than its device holds. Such records are
//     dropped and counted (see Dropper and Sanitize).
//   - A backend with no GPUs returns empty slices and a nil error.
//   - A cancelled context makes Devices and Processes return ctx.Err().
//   - Close releases the driver; calls after Close return ErrClosed, and a
//     second Close returns nil.
//
// Processes is the expensive call (on NVML it takes a driver lock for
// milliseconds); callers share one sampler (internal/sampler) rather than
// polling it themselves.
type Backend interface {
	Name() string
	Devices(ctx context.Context) ([]Device, error)
	Processes(ctx context.Context) ([]Process, error)
	Close() error
}

// Dropper is implemented by backends that drop scrambled process records;
// Dropped returns what the latest Processes call dropped.
type Dropper interface {
	Dropped() DropCounts
}

// DropLog is a Dropper for a backend to embed: Processes records with Set
// what it dropped, and Dropped returns the latest. It is safe for
// concurrent use.
type DropLog struct {
	mu   sync.Mutex
	last DropCounts
}

// Set records what the latest Processes call dropped.
func (l *DropLog) Set(d DropCounts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = d
}

// Dropped implements Dropper.
func (l *DropLog) Dropped() DropCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// DropCounts counts process records that were dropped rather than shown.
type DropCounts struct {
	// BadPID: PID 0, 0xFFFFFFFF or otherwise outside Linux's PID range.
	BadPID int `json:"bad_pid"`
	// OverDevice: a process claiming more memory than its whole device.
	OverDevice int `json:"over_device"`
	// UnknownDevice: a record naming a device the backend did not list.
	UnknownDevice int `json:"unknown_device"`
}

// Add returns the sum of c and o.
func (c DropCounts) Add(o DropCounts) DropCounts {
	return DropCounts{c.BadPID + o.BadPID, c.OverDevice + o.OverDevice, c.UnknownDevice + o.UnknownDevice}
}

// Total is the number of dropped records.
func (c DropCounts) Total() int { return c.BadPID + c.OverDevice + c.UnknownDevice }

// MaxPID is the largest PID Linux can hand out (PID_MAX_LIMIT, 2^22).
const MaxPID = 1 << 22

// Sanitize drops the scrambled process records some drivers return: a PID of
// 0 or 0xFFFFFFFF (anything outside 1..MaxPID), a process using more memory
// than its device's total, or a record for a device not in devs. It returns
// the records kept, in their original order, and what it dropped.
func Sanitize(devs []Device, procs []Process) ([]Process, DropCounts) {
	total := make(map[string]uint64, len(devs))
	for _, d := range devs {
		total[d.UUID] = d.TotalBytes
	}
	var c DropCounts
	kept := make([]Process, 0, len(procs))
	for _, p := range procs {
		t, ok := total[p.DeviceUUID]
		switch {
		case p.PID <= 0 || p.PID > MaxPID:
			c.BadPID++
		case !ok:
			c.UnknownDevice++
		case p.UsedBytes > t:
			c.OverDevice++
		default:
			kept = append(kept, p)
		}
	}
	return kept, c
}

// None is the backend of a machine without GPUs. Reason, when set, says why
// no GPU backend is in use (for example ErrNoDriver's text), so commands can
// say it plainly.
type None struct {
	Reason string
}

func (None) Name() string { return "none" }
func (None) Devices(ctx context.Context) ([]Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return []Device{}, nil
}
func (None) Processes(ctx context.Context) ([]Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return []Process{}, nil
}
func (None) Close() error { return nil }
