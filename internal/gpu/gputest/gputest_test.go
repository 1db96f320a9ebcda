package gputest

import (
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/gpu"
)

// The checks must catch the contract violations they exist for.
func TestChecksCatchViolations(t *testing.T) {
	good := RefDevices()
	tests := []struct {
		name  string
		devs  []gpu.Device
		procs []gpu.Process
		want  string
	}{
		{"used over total", []gpu.Device{{Index: 0, UUID: "a", TotalBytes: 1, UsedBytes: 2}}, nil, "used"},
		{"out of order", []gpu.Device{{Index: 1, UUID: "a"}, {Index: 0, UUID: "b"}}, nil, "listed after"},
		{"orphan MIG", []gpu.Device{{Index: 0, UUID: "a"}, {Index: 0, UUID: "m", ParentUUID: "x"}}, nil, "does not follow"},
		{"pid zero", good, []gpu.Process{{PID: 0, DeviceUUID: RefUUID0}}, "scrambled"},
		{"pid 0xFFFFFFFF", good, []gpu.Process{{PID: RefScrambled, DeviceUUID: RefUUID0}}, "scrambled"},
		{"over device", good, []gpu.Process{{PID: 5, DeviceUUID: RefUUID0, UsedBytes: 81 * GiB}}, "uses"},
		{"unknown device", good, []gpu.Process{{PID: 5, DeviceUUID: "nope"}}, "unlisted"},
		{"wrong index", good, []gpu.Process{{PID: 5, DeviceIndex: 1, DeviceUUID: RefUUID0}}, "device index"},
		{"unordered", good, []gpu.Process{{PID: 6, DeviceUUID: RefUUID0}, {PID: 5, DeviceUUID: RefUUID0}}, "listed after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckDevices(tt.devs)
			if err == nil {
				err = CheckProcesses(tt.devs, tt.procs)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if err := CheckDevices(good); err != nil {
		t.Errorf("reference devices: %v", err)
	}
	if err := CheckProcesses(good, RefProcesses()); err != nil {
		t.Errorf("reference processes: %v", err)
	}
}

func TestSanitize(t *testing.T) {
	devs := RefDevices()
	in := []gpu.Process{
		{PID: 0, DeviceUUID: RefUUID0},
		{PID: RefScrambled, DeviceUUID: RefUUID0},
		{PID: -3, DeviceUUID: RefUUID0},
		{PID: 7, DeviceUUID: RefUUID0, UsedBytes: 80*GiB + 1},
		{PID: 8, DeviceUUID: "GPU-gone"},
		{PID: 9, DeviceUUID: RefUUIDMIG1, UsedBytes: 10 * GiB},
	}
	kept, c := gpu.Sanitize(devs, in)
	if len(kept) != 1 || kept[0].PID != 9 {
		t.Errorf("kept %+v, want only PID 9", kept)
	}
	if want := (gpu.DropCounts{BadPID: 3, OverDevice: 1, UnknownDevice: 1}); c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}
