//go:build cgo

package nvml

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/gputest"
)

const GiB, MiB = gputest.GiB, gputest.MiB

// mockDev is one device of a mock machine.
type mockDev struct {
	uuid, name        string
	total, used       uint64
	reserved          uint64
	util              int // -1: NOT_SUPPORTED
	compute, graphics []gonvml.ProcessInfo
	samples           []gonvml.ProcessUtilizationSample
	mig               []*mockDev
	noV2              bool
	utilCalls         *[]uint64 // lastSeen arguments of GetProcessUtilization
}

func (d *mockDev) device() *mock.Device {
	m := &mock.Device{
		GetUUIDFunc: func() (string, gonvml.Return) { return d.uuid, gonvml.SUCCESS },
		GetNameFunc: func() (string, gonvml.Return) { return d.name, gonvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (gonvml.Memory_v2, gonvml.Return) {
			if d.noV2 {
				return gonvml.Memory_v2{}, gonvml.ERROR_FUNCTION_NOT_FOUND
			}
			return gonvml.Memory_v2{Total: d.total, Used: d.used, Reserved: d.reserved, Free: d.total - d.used - d.reserved}, gonvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) {
			// v1 counts the driver's reservation as used.
			return gonvml.Memory{Total: d.total, Used: d.used + d.reserved, Free: d.total - d.used - d.reserved}, gonvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (gonvml.Utilization, gonvml.Return) {
			if d.util < 0 {
				return gonvml.Utilization{}, gonvml.ERROR_NOT_SUPPORTED
			}
			return gonvml.Utilization{Gpu: uint32(d.util)}, gonvml.SUCCESS
		},
		GetComputeRunningProcessesFunc:  func() ([]gonvml.ProcessInfo, gonvml.Return) { return d.compute, gonvml.SUCCESS },
		GetGraphicsRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) { return d.graphics, gonvml.SUCCESS },
		GetProcessUtilizationFunc: func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			if d.utilCalls != nil {
				*d.utilCalls = append(*d.utilCalls, last)
			}
			var out []gonvml.ProcessUtilizationSample
			for _, s := range d.samples {
				if s.TimeStamp > last {
					out = append(out, s)
				}
			}
			if len(out) == 0 {
				return nil, gonvml.ERROR_NOT_FOUND
			}
			return out, gonvml.SUCCESS
		},
		GetMigModeFunc: func() (int, int, gonvml.Return) {
			if len(d.mig) == 0 {
				return gonvml.DEVICE_MIG_DISABLE, gonvml.DEVICE_MIG_DISABLE, gonvml.SUCCESS
			}
			return gonvml.DEVICE_MIG_ENABLE, gonvml.DEVICE_MIG_ENABLE, gonvml.SUCCESS
		},
		GetMaxMigDeviceCountFunc: func() (int, gonvml.Return) { return 7, gonvml.SUCCESS },
	}
	m.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i >= len(d.mig) || d.mig[i] == nil {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return d.mig[i].device(), gonvml.SUCCESS
	}
	return m
}

// mockLib returns an NVML mock with devs; shutdowns counts Shutdown calls.
func mockLib(devs []*mockDev, initRet gonvml.Return, shutdowns *atomic.Int32) *mock.Interface {
	return &mock.Interface{
		InitFunc:     func() gonvml.Return { return initRet },
		ShutdownFunc: func() gonvml.Return { shutdowns.Add(1); return gonvml.SUCCESS },
		DeviceGetCountFunc: func() (int, gonvml.Return) {
			return len(devs), gonvml.SUCCESS
		},
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			return devs[i].device(), gonvml.SUCCESS
		},
		SystemGetDriverVersionFunc: func() (string, gonvml.Return) { return "550.54.15", gonvml.SUCCESS },
	}
}

// reference builds gputest's reference machine as NVML would report it.
func reference() []*mockDev {
	ts := uint64(gputest.RefTime.UnixMicro())
	return []*mockDev{
		{uuid: gputest.RefUUID0, name: "NVIDIA H100 80GB HBM3", total: 80 * GiB, used: 24*GiB + 512*MiB, util: 70,
			compute: []gonvml.ProcessInfo{
				{Pid: 1002, UsedGpuMemory: 4 * GiB},
				{Pid: 0, UsedGpuMemory: 1 * GiB},
				{Pid: gputest.RefScrambled, UsedGpuMemory: 1 * GiB},
				{Pid: 1001, UsedGpuMemory: 20 * GiB},
				{Pid: 1003, UsedGpuMemory: 100 * GiB},
			},
			// 1001 also has a graphics context; it must be listed once.
			graphics: []gonvml.ProcessInfo{{Pid: 1001, UsedGpuMemory: 20 * GiB}},
			samples: []gonvml.ProcessUtilizationSample{
				{Pid: 1001, TimeStamp: ts - 2_000_000, SmUtil: 10},
				{Pid: 1001, TimeStamp: ts, SmUtil: 55},
			}},
		{uuid: gputest.RefUUID1, name: "NVIDIA A100-SXM4-40GB", total: 40 * GiB, used: 10 * GiB, util: -1,
			// With MIG on, the parent's processes are read from its instances.
			compute: []gonvml.ProcessInfo{{Pid: 2001, UsedGpuMemory: 8 * GiB}, {Pid: 2002, UsedGpuMemory: 2 * GiB}},
			mig: []*mockDev{
				{uuid: gputest.RefUUIDMIG0, name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb", total: 20 * GiB, used: 8 * GiB, util: -1,
					compute: []gonvml.ProcessInfo{{Pid: 2001, UsedGpuMemory: 8 * GiB}}},
				nil, // an empty slot between instances
				{uuid: gputest.RefUUIDMIG1, name: "NVIDIA A100-SXM4-40GB MIG 2g.10gb", total: 10 * GiB, used: 2 * GiB, util: -1,
					compute: []gonvml.ProcessInfo{{Pid: 2002, UsedGpuMemory: 2 * GiB}}},
			}},
	}
}

func TestConformance(t *testing.T) {
	gputest.Run(t, func(t *testing.T) gputest.Fixture {
		var sd atomic.Int32
		b, err := New(mockLib(reference(), gonvml.SUCCESS, &sd))
		if err != nil {
			t.Fatal(err)
		}
		f := gputest.Reference(b)
		// The mock's second MIG instance sits in slot 2 (slot 1 is empty).
		f.Devices[3].MIGIndex = 2
		return f
	})
}

func TestInitFailures(t *testing.T) {
	tests := []struct {
		ret      gonvml.Return
		noDriver bool
	}{
		{gonvml.ERROR_LIBRARY_NOT_FOUND, true},
		{gonvml.ERROR_DRIVER_NOT_LOADED, true},
		{gonvml.ERROR_NO_PERMISSION, false},
	}
	for _, tt := range tests {
		t.Run(tt.ret.Error(), func(t *testing.T) {
			var sd atomic.Int32
			_, err := New(mockLib(nil, tt.ret, &sd))
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, gpu.ErrNoDriver) != tt.noDriver {
				t.Errorf("err = %v; no-driver = %v, want %v", err, !tt.noDriver, tt.noDriver)
			}
		})
	}
}

// The real loader on this machine: without the driver Open must say so.
func TestOpenWithoutDriverSaysSo(t *testing.T) {
	b, err := Open()
	if err == nil {
		// A machine with the driver: the real library must then work.
		defer b.Close()
		devs, err := b.Devices(context.Background())
		if err != nil {
			t.Fatalf("NVML loaded but Devices failed: %v", err)
		}
		if err := gputest.CheckDevices(devs); err != nil {
			t.Error(err)
		}
		return
	}
	if !errors.Is(err, gpu.ErrNoDriver) || err.Error() != gpu.ErrNoDriver.Error() {
		t.Fatalf("Open without a driver: %v, want %v", err, gpu.ErrNoDriver)
	}
}

func TestMemoryV1Fallback(t *testing.T) {
	devs := []*mockDev{{uuid: "GPU-1", name: "old", total: 16 * GiB, used: 1 * GiB, reserved: 300 * MiB, util: 3, noV2: true}}
	var sd atomic.Int32
	b, err := New(mockLib(devs, gonvml.SUCCESS, &sd))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got[0].UsedBytes != 1*GiB+300*MiB || got[0].ReservedBytes != 0 {
		t.Errorf("v1 fallback: used %d reserved %d", got[0].UsedBytes, got[0].ReservedBytes)
	}
	devs[0].noV2 = false
	b2, _ := New(mockLib(devs, gonvml.SUCCESS, &sd))
	got, _ = b2.Devices(context.Background())
	if got[0].UsedBytes != 1*GiB || got[0].ReservedBytes != 300*MiB {
		t.Errorf("v2: used %d reserved %d", got[0].UsedBytes, got[0].ReservedBytes)
	}
}

func TestMemoryNotAvailable(t *testing.T) {
	devs := []*mockDev{{uuid: "GPU-1", name: "g", total: 16 * GiB, util: 0,
		compute: []gonvml.ProcessInfo{{Pid: 42, UsedGpuMemory: notAvailable}}}}
	var sd atomic.Int32
	b, _ := New(mockLib(devs, gonvml.SUCCESS, &sd))
	ps, err := b.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || !ps[0].MemoryUnknown || ps[0].UsedBytes != 0 {
		t.Fatalf("got %+v, want PID 42 with memory unknown", ps)
	}
	if b.Dropped().Total() != 0 {
		t.Errorf("a process with unknown memory was dropped: %+v", b.Dropped())
	}
}

// Each call asks only for samples newer than the last one seen, and keeps
// showing a process's last sample while the driver has nothing newer.
func TestProcessUtilLastSeen(t *testing.T) {
	var calls []uint64
	devs := []*mockDev{{uuid: "GPU-1", name: "g", total: 16 * GiB, util: 0, utilCalls: &calls,
		compute: []gonvml.ProcessInfo{{Pid: 42, UsedGpuMemory: GiB}},
		samples: []gonvml.ProcessUtilizationSample{{Pid: 42, TimeStamp: 5_000_000, SmUtil: 30}}}}
	var sd atomic.Int32
	b, _ := New(mockLib(devs, gonvml.SUCCESS, &sd))
	ctx := context.Background()
	p1, _ := b.Processes(ctx)
	p2, _ := b.Processes(ctx)
	devs[0].samples = append(devs[0].samples, gonvml.ProcessUtilizationSample{Pid: 42, TimeStamp: 6_000_000, SmUtil: 90})
	p3, _ := b.Processes(ctx)
	if want := []uint64{0, 5_000_000, 5_000_000}; len(calls) != 3 || calls[0] != want[0] || calls[1] != want[1] || calls[2] != want[2] {
		t.Errorf("lastSeen arguments %v, want %v", calls, want)
	}
	if p1[0].SMUtilPercent != 30 || p2[0].SMUtilPercent != 30 || p3[0].SMUtilPercent != 90 {
		t.Errorf("utilisation %d, %d, %d; want 30, 30, 90", p1[0].SMUtilPercent, p2[0].SMUtilPercent, p3[0].SMUtilPercent)
	}
	if got := p3[0].LastSeen.UnixMicro(); got != 6_000_000 {
		t.Errorf("LastSeen %d µs, want 6000000", got)
	}
}

func TestCloseShutsDownOnce(t *testing.T) {
	var sd atomic.Int32
	b, _ := New(mockLib(reference(), gonvml.SUCCESS, &sd))
	b.Close()
	b.Close()
	if sd.Load() != 1 {
		t.Errorf("Shutdown called %d times, want 1", sd.Load())
	}
	if v := b.DriverVersion(); v != "" {
		t.Errorf("driver version after close: %q", v)
	}
}
