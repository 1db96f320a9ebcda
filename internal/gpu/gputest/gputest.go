// Package gputest is the conformance suite for gpu.Backend. Every
// implementation runs it from its own tests with a fixture that says what the
// backend must report; the suite checks the contract written on gpu.Backend.
package gputest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/gpu"
)

// Fixture is one backend under test and what it must report.
type Fixture struct {
	Backend gpu.Backend
	// Devices and Processes are the exact expected results. LastSeen is
	// compared only for being zero or not.
	Devices   []gpu.Device
	Processes []gpu.Process
	// Dropped is what the backend must say it dropped (checked when it
	// implements gpu.Dropper; a non-zero Dropped requires that it does).
	Dropped gpu.DropCounts
	// StatelessClose marks a backend whose Close has nothing to release
	// (gpu.None): calls after Close still work.
	StatelessClose bool
}

// listed is what list returns, failing the test on its error and marking
// it failed for a nil slice (an empty list is an empty slice).
func listed[T any](t *testing.T, what string, list func(context.Context) ([]T, error)) []T {
	t.Helper()
	got, err := list(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got == nil {
		t.Errorf("%s returned a nil slice; want an empty one", what)
	}
	return got
}

// Run runs the suite. open is called once per subtest and must return a
// fresh, open backend.
func Run(t *testing.T, open func(t *testing.T) Fixture) {
	t.Helper()
	ctx := context.Background()
	t.Run("Devices", func(t *testing.T) {
		f := open(t)
		got := listed(t, "Devices", f.Backend.Devices)
		if !reflect.DeepEqual(nonNil(got), nonNil(f.Devices)) {
			t.Errorf("Devices:\n got %+v\nwant %+v", got, f.Devices)
		}
	})
	t.Run("DeviceOrderAndMemory", func(t *testing.T) {
		f := open(t)
		if err := CheckDevices(listed(t, "Devices", f.Backend.Devices)); err != nil {
			t.Error(err)
		}
	})
	t.Run("Processes", func(t *testing.T) {
		f := open(t)
		got := listed(t, "Processes", f.Backend.Processes)
		if !reflect.DeepEqual(normalise(got), normalise(f.Processes)) {
			t.Errorf("Processes:\n got %+v\nwant %+v", got, f.Processes)
		}
		if err := CheckProcesses(listed(t, "Devices", f.Backend.Devices), got); err != nil {
			t.Error(err)
		}
	})
	t.Run("Dropped", func(t *testing.T) {
		f := open(t)
		if _, err := f.Backend.Processes(ctx); err != nil {
			t.Fatal(err)
		}
		d, ok := f.Backend.(gpu.Dropper)
		if !ok {
			if f.Dropped.Total() != 0 {
				t.Fatalf("%s drops records but does not implement gpu.Dropper", f.Backend.Name())
			}
			return
		}
		if got := d.Dropped(); got != f.Dropped {
			t.Errorf("Dropped = %+v, want %+v", got, f.Dropped)
		}
	})
	t.Run("FreshSlices", func(t *testing.T) {
		f := open(t)
		devs, procs := listed(t, "Devices", f.Backend.Devices), listed(t, "Processes", f.Backend.Processes)
		for i := range devs {
			devs[i].UUID, devs[i].TotalBytes = "scribbled", 1
		}
		for i := range procs {
			procs[i].PID, procs[i].UsedBytes = -1, 1
		}
		devs2, _ := f.Backend.Devices(ctx)
		procs2, _ := f.Backend.Processes(ctx)
		if !reflect.DeepEqual(nonNil(devs2), nonNil(f.Devices)) || !reflect.DeepEqual(normalise(procs2), normalise(f.Processes)) {
			t.Errorf("changing returned slices changed later results")
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		f := open(t)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					d, err := f.Backend.Devices(ctx)
					if err != nil {
						errs <- err
						return
					}
					p, err := f.Backend.Processes(ctx)
					if err != nil {
						errs <- err
						return
					}
					if !reflect.DeepEqual(nonNil(d), nonNil(f.Devices)) || !reflect.DeepEqual(normalise(p), normalise(f.Processes)) {
						errs <- fmt.Errorf("concurrent call %d returned different results", i)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("CancelledContext", func(t *testing.T) {
		f := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := f.Backend.Devices(cctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Devices with a cancelled context: err = %v, want context.Canceled", err)
		}
		if _, err := f.Backend.Processes(cctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Processes with a cancelled context: err = %v, want context.Canceled", err)
		}
	})
	t.Run("Close", func(t *testing.T) {
		f := open(t)
		if err := f.Backend.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := f.Backend.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if f.StatelessClose {
			if _, err := f.Backend.Devices(ctx); err != nil {
				t.Errorf("stateless backend after Close: %v", err)
			}
			return
		}
		if _, err := f.Backend.Devices(ctx); !errors.Is(err, gpu.ErrClosed) {
			t.Errorf("Devices after Close: err = %v, want gpu.ErrClosed", err)
		}
		if _, err := f.Backend.Processes(ctx); !errors.Is(err, gpu.ErrClosed) {
			t.Errorf("Processes after Close: err = %v, want gpu.ErrClosed", err)
		}
	})
}

// CheckDevices checks the ordering and memory rules of the contract.
func CheckDevices(devs []gpu.Device) error {
	var lastGPU *gpu.Device
	for i := range devs {
		d := devs[i]
		if d.UsedBytes > d.TotalBytes || d.FreeBytes > d.TotalBytes || d.UsedBytes+d.FreeBytes > d.TotalBytes {
			return fmt.Errorf("device %d (%s): used %d + free %d > total %d", d.Index, d.UUID, d.UsedBytes, d.FreeBytes, d.TotalBytes)
		}
		if d.UUID == "" {
			return fmt.Errorf("device %d has no UUID", d.Index)
		}
		if !d.IsMIG() {
			if lastGPU != nil && d.Index <= lastGPU.Index {
				return fmt.Errorf("device %d listed after device %d", d.Index, lastGPU.Index)
			}
			lastGPU = &devs[i]
			continue
		}
		if lastGPU == nil || d.ParentUUID != lastGPU.UUID || d.Index != lastGPU.Index {
			return fmt.Errorf("MIG instance %s does not follow its parent %s", d.UUID, d.ParentUUID)
		}
		if i > 0 && devs[i-1].IsMIG() && devs[i-1].MIGIndex >= d.MIGIndex {
			return fmt.Errorf("MIG instance %d listed after %d", d.MIGIndex, devs[i-1].MIGIndex)
		}
	}
	return nil
}

// CheckProcesses checks that procs name listed devices, are ordered by device
// then PID, and hold no scrambled record.
func CheckProcesses(devs []gpu.Device, procs []gpu.Process) error {
	pos := map[string]int{}
	for i, d := range devs {
		pos[d.UUID] = i
	}
	for i, p := range procs {
		di, ok := pos[p.DeviceUUID]
		if !ok {
			return fmt.Errorf("process %d on unlisted device %s", p.PID, p.DeviceUUID)
		}
		if devs[di].Index != p.DeviceIndex {
			return fmt.Errorf("process %d: device index %d, device %s has %d", p.PID, p.DeviceIndex, p.DeviceUUID, devs[di].Index)
		}
		if p.PID <= 0 || p.PID > gpu.MaxPID {
			return fmt.Errorf("scrambled PID %d returned", p.PID)
		}
		if p.UsedBytes > devs[di].TotalBytes {
			return fmt.Errorf("process %d uses %d of a %d-byte device", p.PID, p.UsedBytes, devs[di].TotalBytes)
		}
		if p.MemoryUnknown && p.UsedBytes != 0 {
			return fmt.Errorf("process %d: memory unknown but UsedBytes %d", p.PID, p.UsedBytes)
		}
		if i > 0 {
			q := procs[i-1]
			if pq := pos[q.DeviceUUID]; pq > di || (pq == di && q.PID >= p.PID) {
				return fmt.Errorf("process %d on %s listed after %d on %s", p.PID, p.DeviceUUID, q.PID, q.DeviceUUID)
			}
		}
	}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

var seen = time.Unix(1, 0)

// normalise keeps only whether LastSeen is set, as backends stamp it with
// their own clocks.
func normalise(ps []gpu.Process) []gpu.Process {
	out := make([]gpu.Process, len(ps))
	for i, p := range ps {
		out[i] = p
		if !p.LastSeen.IsZero() {
			out[i].LastSeen = seen
		}
	}
	return out
}
