package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/gpu"
)

func TestCUDAForDriver(t *testing.T) {
	for in, want := range map[string]int{
		"550.54.15": 12040, "550.54.14": 12040, "550.40.07": 12030, "535.183.01": 12020,
		"470.82.01": 11040, "580.65.06": 13000, "999.1": 13000, "440.33": 0, "": 0, "abc": 0,
	} {
		if got := CUDAForDriver(in); got != want {
			t.Errorf("CUDAForDriver(%q) = %d, want %d", in, got, want)
		}
	}
}

type fakeBackend struct {
	gpu.None
	devs  []gpu.Device
	procs []gpu.Process
	err   error
}

func (f fakeBackend) Devices(context.Context) ([]gpu.Device, error)    { return f.devs, f.err }
func (f fakeBackend) Processes(context.Context) ([]gpu.Process, error) { return f.procs, nil }

func TestBackendGPU(t *testing.T) {
	b := fakeBackend{
		devs:  []gpu.Device{{Index: 0, UUID: "GPU-a", Name: "L4", TotalBytes: 24 << 30, UsedBytes: 1 << 30}},
		procs: []gpu.Process{{PID: 7, DeviceIndex: 0, UsedBytes: 1 << 30}},
	}
	snap, err := BackendGPU{Backend: b, Info: func(context.Context) (string, int, map[int]bool, error) {
		return "550.54.15", 12040, map[int]bool{0: false}, nil
	}}.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.DriverVersion != "550.54.15" || snap.CUDADriverVersion != 12040 || len(snap.Devices) != 1 || len(snap.Processes) != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
	if p := snap.Devices[0].Persistence; p == nil || *p {
		t.Errorf("persistence %v, want off", p)
	}
	if snap.Processes[0].PID != 7 || snap.Processes[0].UsedBytes != 1<<30 {
		t.Errorf("process %+v", snap.Processes[0])
	}
	b.err = errors.New("GPU is lost")
	if _, err := (BackendGPU{Backend: b}).Snapshot(context.Background()); err == nil || !strings.Contains(err.Error(), "GPU is lost") {
		t.Errorf("err = %v", err)
	}
}

// TestNVMLLive: on a machine without the NVIDIA driver, the real NVML
// source reports gpu.ErrNoDriver, which the checks turn into n/a. On a GPU
// machine it returns the devices instead.
func TestNVMLLive(t *testing.T) {
	snap, err := NVML{}.Snapshot(context.Background())
	if err != nil {
		if !errors.Is(err, gpu.ErrNoDriver) {
			t.Fatalf("NVML failed with something other than ErrNoDriver: %v", err)
		}
		r := checkNVML(&facts{gpuErr: err})
		if r.Status != NA {
			t.Errorf("gpu.nvml = %s without the driver", r.Status)
		}
		return
	}
	if len(snap.Devices) == 0 || snap.DriverVersion == "" || snap.CUDADriverVersion == 0 {
		t.Errorf("NVML loaded but the snapshot is incomplete: %+v", snap)
	}
}
