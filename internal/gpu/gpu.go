// Package gpu is the only place that knows how GPU devices and their processes
// are read. Everything else sees a Backend. It must never initialise CUDA and
// never block longer than one driver call.
package gpu

import (
	"context"
	"errors"
	"time"
)

// ErrNoDriver is returned by a backend whose driver library cannot be found.
var ErrNoDriver = errors.New("no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)")

// Device is one GPU (or one MIG instance) as the driver reports it.
type Device struct {
	Index      int    `json:"index"`
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	TotalBytes uint64 `json:"total_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
	// UtilPercent is the GPU (SM) utilisation over the driver's last sample
	// period, or -1 when the driver does not report it.
	UtilPercent int `json:"util_percent"`
}

// Process is one process holding memory on one device. A process on two
// devices appears twice.
type Process struct {
	PID         int    `json:"pid"`
	DeviceIndex int    `json:"device_index"`
	DeviceUUID  string `json:"device_uuid"`
	UsedBytes   uint64 `json:"used_bytes"`
	// SMUtilPercent is the process's SM utilisation, -1 when unknown.
	SMUtilPercent int       `json:"sm_util_percent"`
	LastSeen      time.Time `json:"last_seen,omitzero"`
}

// Backend reads GPU state.
//
// Contract: Devices and Processes are safe for concurrent use, return fresh
// slices the caller may keep, and report every device in index order. A
// backend with no GPUs returns empty slices and a nil error. Close releases
// the driver; calls after Close return an error.
type Backend interface {
	Name() string
	Devices(ctx context.Context) ([]Device, error)
	Processes(ctx context.Context) ([]Process, error)
	Close() error
}

// None is the backend of a machine without GPUs.
type None struct{}

func (None) Name() string                                 { return "none" }
func (None) Devices(context.Context) ([]Device, error)    { return nil, nil }
func (None) Processes(context.Context) ([]Process, error) { return nil, nil }
func (None) Close() error                                 { return nil }
