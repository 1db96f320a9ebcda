// Package sim is a gpu.Backend driven by a scenario file: devices, processes,
// their memory over time, spawns and exits. It serves tests, demos and
// `--simulate SCENARIO` on machines without a GPU. It never touches a driver
// and never signals a process.
package sim

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/gpu"
)

// Backend plays a Scenario against a clock.
type Backend struct {
	sc    *Scenario
	now   func() time.Time
	start time.Time
	devs  []flatDevice

	mu     sync.Mutex
	closed bool
	drops  gpu.DropLog // Dropped: what the latest Processes dropped
}

// Option configures a Backend.
type Option func(*Backend)

// WithClock sets the clock the scenario is played against; the scenario's
// time zero is the clock's reading when New is called.
func WithClock(now func() time.Time) Option { return func(b *Backend) { b.now = now } }

// New returns a backend playing sc.
func New(sc *Scenario, opts ...Option) *Backend {
	b := &Backend{sc: sc, now: time.Now}
	for _, o := range opts {
		o(b)
	}
	b.start = b.now()
	b.devs = sc.flatDevices()
	return b
}

// Open loads the scenario at path and plays it from now.
func Open(path string, opts ...Option) (*Backend, error) {
	sc, err := Load(path)
	if err != nil {
		return nil, err
	}
	return New(sc, opts...), nil
}

// Scenario returns the scenario being played.
func (b *Backend) Scenario() *Scenario { return b.sc }

func (b *Backend) Name() string { return "sim" }

// Elapsed is the scenario time now (wrapped when the scenario loops, held at
// the end otherwise).
func (b *Backend) Elapsed() time.Duration {
	t := b.now().Sub(b.start)
	d := time.Duration(b.sc.Duration)
	if t < 0 {
		t = 0
	}
	if d > 0 && t > d {
		if b.sc.Loop {
			t %= d
		} else {
			t = d
		}
	}
	return t
}

func (b *Backend) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.ErrClosed
	}
	return nil
}

func alive(p *ProcessSpec, t time.Duration) bool {
	return t >= time.Duration(p.Start) && (p.End == 0 || t < time.Duration(p.End))
}

// Devices implements gpu.Backend.
func (b *Backend) Devices(ctx context.Context) ([]gpu.Device, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	t := b.Elapsed()
	used := make([]uint64, len(b.devs))
	util := make([]int, len(b.devs))
	hasUtil := make([]bool, len(b.devs))
	for i := range b.sc.Processes {
		p := &b.sc.Processes[i]
		if p.Device == nil || p.Raw || !alive(p, t) {
			continue
		}
		used[*p.Device] += p.Memory.At(t - time.Duration(p.Start))
		if p.SMUtil != nil {
			util[*p.Device] += int(p.SMUtil.At(t - time.Duration(p.Start)))
			hasUtil[*p.Device] = true
		}
	}
	out := make([]gpu.Device, 0, len(b.devs))
	for i, fd := range b.devs {
		u := uint64(fd.spec.Baseline) + used[i]
		if fd.parent == "" {
			// A GPU's memory includes that of its MIG instances.
			for j := i + 1; j < len(b.devs) && b.devs[j].parent == fd.uuid; j++ {
				u += used[j] + uint64(b.devs[j].spec.Baseline)
			}
		}
		total := uint64(fd.spec.Total)
		u = min(u, total)
		ut := -1
		switch {
		case fd.spec.Util != nil:
			ut = *fd.spec.Util
		case hasUtil[i]:
			ut = min(util[i], 100)
		}
		out = append(out, gpu.Device{
			Index: fd.index, UUID: fd.uuid, Name: fd.spec.Name,
			TotalBytes: total, UsedBytes: u, FreeBytes: total - u,
			UtilPercent: ut, ParentUUID: fd.parent, MIGIndex: fd.mig,
		})
	}
	return out, nil
}

// Processes implements gpu.Backend. Scrambled records the scenario marks as
// raw go through gpu.Sanitize exactly as a driver's would.
func (b *Backend) Processes(ctx context.Context) ([]gpu.Process, error) {
	devs, err := b.Devices(ctx)
	if err != nil {
		return nil, err
	}
	t := b.Elapsed()
	now := b.now()
	var raw []gpu.Process
	for i := range b.sc.Processes {
		p := &b.sc.Processes[i]
		if p.Device == nil || !alive(p, t) {
			continue
		}
		fd := b.devs[*p.Device]
		gp := gpu.Process{
			PID: p.PID.N, DeviceIndex: fd.index, DeviceUUID: fd.uuid,
			UsedBytes: p.Memory.At(t - time.Duration(p.Start)), SMUtilPercent: -1,
		}
		if p.SMUtil != nil {
			gp.SMUtilPercent = int(p.SMUtil.At(t - time.Duration(p.Start)))
			gp.LastSeen = now
		}
		raw = append(raw, gp)
	}
	kept, dropped := gpu.Sanitize(devs, raw)
	b.mu.Lock()
	b.drops.Set(dropped)
	b.mu.Unlock()
	sort.SliceStable(kept, func(i, j int) bool {
		a, c := kept[i], kept[j]
		ia, ic := devPos(devs, a.DeviceUUID), devPos(devs, c.DeviceUUID)
		if ia != ic {
			return ia < ic
		}
		return a.PID < c.PID
	})
	return kept, nil
}

func devPos(devs []gpu.Device, uuid string) int {
	for i, d := range devs {
		if d.UUID == uuid {
			return i
		}
	}
	return len(devs)
}

// Dropped implements gpu.Dropper.
func (b *Backend) Dropped() gpu.DropCounts { return b.drops.Dropped() }

// Close implements gpu.Backend.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}
