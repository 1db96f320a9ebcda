package gputest

import (
	"time"

	"github.com/vramguard/vramguard/internal/gpu"
)

// The reference machine is what every real backend's test fixture builds (a
// scenario file for sim, go-nvml's mock for nvml), so all of them are held to
// the same expected results:
//
//	GPU 0  H100 80 GiB, 512 MiB baseline, util 70%:
//	       PID 1001 20 GiB (SM 55%), PID 1002 4 GiB (no utilisation sample),
//	       and three scrambled records: PID 0, PID 0xFFFFFFFF, and PID 1003
//	       claiming 100 GiB
//	GPU 1  A100 40 GiB with MIG on, util not reported:
//	       MIG 0 (3g.20gb, 20 GiB): PID 2001 8 GiB
//	       MIG 1 (2g.10gb, 10 GiB): PID 2002 2 GiB
const (
	GiB = uint64(1) << 30
	MiB = uint64(1) << 20

	RefUUID0     = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	RefUUID1     = "GPU-bbbbbbbb-1111-1111-1111-111111111111"
	RefUUIDMIG0  = "MIG-cccccccc-2222-2222-2222-222222222222"
	RefUUIDMIG1  = "MIG-dddddddd-3333-3333-3333-333333333333"
	RefScrambled = 0xFFFFFFFF
)

// RefDevices is what Devices must return on the reference machine.
func RefDevices() []gpu.Device {
	return []gpu.Device{
		{Index: 0, UUID: RefUUID0, Name: "NVIDIA H100 80GB HBM3", TotalBytes: 80 * GiB,
			UsedBytes: 24*GiB + 512*MiB, FreeBytes: 80*GiB - 24*GiB - 512*MiB, UtilPercent: 70},
		{Index: 1, UUID: RefUUID1, Name: "NVIDIA A100-SXM4-40GB", TotalBytes: 40 * GiB,
			UsedBytes: 10 * GiB, FreeBytes: 30 * GiB, UtilPercent: -1},
		{Index: 1, UUID: RefUUIDMIG0, Name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb", TotalBytes: 20 * GiB,
			UsedBytes: 8 * GiB, FreeBytes: 12 * GiB, UtilPercent: -1, ParentUUID: RefUUID1, MIGIndex: 0},
		{Index: 1, UUID: RefUUIDMIG1, Name: "NVIDIA A100-SXM4-40GB MIG 2g.10gb", TotalBytes: 10 * GiB,
			UsedBytes: 2 * GiB, FreeBytes: 8 * GiB, UtilPercent: -1, ParentUUID: RefUUID1, MIGIndex: 1},
	}
}

// RefProcesses is what Processes must return on the reference machine.
func RefProcesses() []gpu.Process {
	return []gpu.Process{
		{PID: 1001, DeviceIndex: 0, DeviceUUID: RefUUID0, UsedBytes: 20 * GiB, SMUtilPercent: 55, LastSeen: seen},
		{PID: 1002, DeviceIndex: 0, DeviceUUID: RefUUID0, UsedBytes: 4 * GiB, SMUtilPercent: -1},
		{PID: 2001, DeviceIndex: 1, DeviceUUID: RefUUIDMIG0, UsedBytes: 8 * GiB, SMUtilPercent: -1},
		{PID: 2002, DeviceIndex: 1, DeviceUUID: RefUUIDMIG1, UsedBytes: 2 * GiB, SMUtilPercent: -1},
	}
}

// RefDropped is what the reference machine's scrambled records count as.
var RefDropped = gpu.DropCounts{BadPID: 2, OverDevice: 1}

// Reference returns the fixture for b playing the reference machine.
func Reference(b gpu.Backend) Fixture {
	return Fixture{Backend: b, Devices: RefDevices(), Processes: RefProcesses(), Dropped: RefDropped}
}

// RefTime is a fixed clock reading for backends that stamp samples.
var RefTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
