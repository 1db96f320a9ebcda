// Package sampler is the one place that polls the GPU backend. NVML's process
// query is expensive (milliseconds, under a driver lock), so one Sampler reads
// process lists at most once a second, device memory possibly faster, and
// every reader (top, the agent, the HTTP API) shares its results instead of
// asking the driver itself. It never signals a process.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/timeline"
)

// MinProcessInterval is the shortest allowed period between process-list
// queries.
const MinProcessInterval = time.Second

// minDeviceInterval bounds device polling; device memory queries are cheap
// but not free.
const minDeviceInterval = 100 * time.Millisecond

// minProcess is MinProcessInterval, lowered only by this package's tests.
var minProcess = MinProcessInterval

// Config configures a Sampler.
type Config struct {
	Backend gpu.Backend
	// Attributor groups processes into jobs; nil leaves Reading.Attrib empty.
	Attributor *attrib.Attributor
	// ProcessInterval is the period of process-list queries (default and
	// minimum MinProcessInterval).
	ProcessInterval time.Duration
	// DeviceInterval is the period of device-memory queries (default
	// ProcessInterval, minimum 100ms, never slower than ProcessInterval).
	DeviceInterval time.Duration
	// History is how long each job's points are kept (default 10 minutes).
	History time.Duration
	Now     func() time.Time
	// Probes supplies PyTorch's figures per process (nil: none).
	Probes ProbeSource
	// OOMWarning is when the monitor of a job not supervised by vramguard
	// run raises oom_forecast (default 10 minutes).
	OOMWarning time.Duration
	// Runs supplies the supervised runs in progress (nil: none): each
	// becomes a job, and is judged by its own monitor's findings.
	Runs RunSource
	// Environ reads a process's environment (procfs.FS.Environ), for the
	// rank of each process of a job (attrib.Process.Rank); nil: no ranks.
	Environ func(pid int) ([]string, error)
}

// Reading is one shared reading of the machine (devices, processes, jobs). Readers must treat its slices as read-only.
type Reading struct {
	// Seq increases with every update (device-only updates included).
	Seq uint64 `json:"seq"`
	// Time is when devices were read; ProcessTime when processes were.
	Time        time.Time      `json:"time"`
	ProcessTime time.Time      `json:"process_time"`
	Backend     string         `json:"backend"`
	Devices     []gpu.Device   `json:"devices"`
	Processes   []gpu.Process  `json:"-"`
	Dropped     gpu.DropCounts `json:"dropped"`
	Attrib      attrib.Result  `json:"-"`
	// Took is how long the last full sample took (driver, /proc, cgroups).
	Took time.Duration `json:"took_ns"`
	// Runs are the supervised runs in progress (with Config.Runs).
	Runs []timeline.RunState `json:"-"`
	// Judged holds each job's judgement by job key; Attrib.Jobs[i].Flags
	// are its short form.
	Judged map[string]*Judgement `json:"-"`
}

// Sampler polls a backend and shares the results.
type Sampler struct {
	cfg Config

	mu      sync.Mutex
	latest  Reading
	have    bool
	changed chan struct{}
	hist    map[string][]timeline.Point
	mons    map[string]*monitor.Monitor // the monitor of each job not supervised by vramguard run
	places  ranks.Cache                 // each process's place in a distributed job, read once
}

// New returns a Sampler; it does not poll until Run or Refresh.
func New(cfg Config) (*Sampler, error) {
	if cfg.Backend == nil {
		return nil, errors.New("sampler: no backend")
	}
	if cfg.ProcessInterval < minProcess {
		cfg.ProcessInterval = minProcess
	}
	if cfg.DeviceInterval == 0 || cfg.DeviceInterval > cfg.ProcessInterval {
		cfg.DeviceInterval = cfg.ProcessInterval
	}
	if cfg.DeviceInterval < minDeviceInterval {
		cfg.DeviceInterval = minDeviceInterval
	}
	if cfg.History <= 0 {
		cfg.History = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Sampler{cfg: cfg, changed: make(chan struct{}), hist: map[string][]timeline.Point{}, mons: map[string]*monitor.Monitor{}}, nil
}

// Intervals returns the process and device polling periods in force.
func (s *Sampler) Intervals() (process, device time.Duration) {
	return s.cfg.ProcessInterval, s.cfg.DeviceInterval
}

// Refresh takes a full sample now (devices, processes, attribution),
// publishes it and returns it.
func (s *Sampler) Refresh(ctx context.Context) (Reading, error) {
	start := time.Now()
	devs, err := s.cfg.Backend.Devices(ctx)
	if err != nil {
		return Reading{}, fmt.Errorf("read GPU devices: %w", err)
	}
	procs, err := s.cfg.Backend.Processes(ctx)
	if err != nil {
		return Reading{}, fmt.Errorf("read GPU processes: %w", err)
	}
	now := s.cfg.Now()
	smp := Reading{Time: now, ProcessTime: now, Backend: s.cfg.Backend.Name(), Devices: devs, Processes: procs}
	if d, ok := s.cfg.Backend.(gpu.Dropper); ok {
		smp.Dropped = d.Dropped()
	}
	if s.cfg.Attributor != nil {
		res, err := s.cfg.Attributor.Attribute(procs)
		if err != nil {
			return Reading{}, err
		}
		smp.Attrib = res
	} else {
		smp.Attrib = attrib.Result{Jobs: []attrib.Job{}, Vanished: []gpu.Process{}}
	}
	s.addRanks(&smp)
	s.addProbes(&smp)
	s.addRuns(ctx, &smp)
	smp.Took = time.Since(start)

	s.mu.Lock()
	s.record(&smp, now)
	s.publish(smp)
	smp = s.latest
	s.mu.Unlock()
	return smp, nil
}

// record appends each job's point to its history, prunes old points and
// gone jobs, and runs the flag hook. s.mu is held.
func (s *Sampler) record(smp *Reading, now time.Time) {
	cut := now.Add(-s.cfg.History)
	totals := map[int]uint64{}
	for _, d := range smp.Devices {
		if _, ok := totals[d.Index]; !ok {
			totals[d.Index] = d.TotalBytes
		}
	}
	seen := map[string]bool{}
	for i := range smp.Attrib.Jobs {
		j := &smp.Attrib.Jobs[i]
		seen[j.Key] = true
		p := timeline.Point{T: now.UnixMilli(), GPU: int64(j.GPUBytes), RSS: int64(j.RSSBytes), Alloc: -1, Reserved: -1, Util: int64(j.SMUtilPercent)}
		if j.AllocatedBytes != nil {
			p.Alloc = int64(*j.AllocatedBytes)
		}
		if j.ReservedBytes != nil {
			p.Reserved = int64(*j.ReservedBytes)
		}
		h := append(s.hist[j.Key], p)
		k := 0
		for k < len(h) && h[k].T < cut.UnixMilli() {
			k++
		}
		h = h[k:]
		s.hist[j.Key] = h
		s.judge(j, smp, now, totals)
	}
	for k, h := range s.hist {
		if !seen[k] && (len(h) == 0 || h[len(h)-1].T < cut.UnixMilli()) {
			delete(s.hist, k)
		}
	}
	for k := range s.mons {
		if !seen[k] {
			delete(s.mons, k) // a job that comes back starts a new timeline
		}
	}
}

// publish makes smp the latest sample and wakes readers. s.mu is held.
func (s *Sampler) publish(smp Reading) {
	smp.Seq = s.latest.Seq + 1
	s.latest, s.have = smp, true
	close(s.changed)
	s.changed = make(chan struct{})
}

// refreshDevices updates only device memory in the latest sample.
func (s *Sampler) refreshDevices(ctx context.Context) error {
	devs, err := s.cfg.Backend.Devices(ctx)
	if err != nil {
		return fmt.Errorf("read GPU devices: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	smp := s.latest
	smp.Devices, smp.Time = devs, s.cfg.Now()
	s.publish(smp)
	return nil
}

// Run polls until ctx ends. A failed poll is returned to the caller through
// onErr (if not nil) and polling goes on.
func (s *Sampler) Run(ctx context.Context, onErr func(error)) error {
	report := func(err error) {
		if err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
	}
	_, err := s.Refresh(ctx)
	report(err)
	proc := time.NewTicker(s.cfg.ProcessInterval)
	defer proc.Stop()
	var dev <-chan time.Time
	if s.cfg.DeviceInterval < s.cfg.ProcessInterval {
		t := time.NewTicker(s.cfg.DeviceInterval)
		defer t.Stop()
		dev = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-proc.C:
			_, err := s.Refresh(ctx)
			report(err)
		case <-dev:
			report(s.refreshDevices(ctx))
		}
	}
}

// Latest returns the most recent sample, and false before the first.
func (s *Sampler) Latest() (Reading, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest, s.have
}

// Next waits for a sample newer than seq (0: any) and returns it.
func (s *Sampler) Next(ctx context.Context, seq uint64) (Reading, error) {
	for {
		s.mu.Lock()
		if s.have && s.latest.Seq > seq {
			smp := s.latest
			s.mu.Unlock()
			return smp, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Reading{}, ctx.Err()
		}
	}
}

// History returns a copy of the job's points, oldest first.
func (s *Sampler) History(key string) []timeline.Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]timeline.Point(nil), s.hist[key]...)
}

// addRanks gives each process of a job its place in a distributed job, as
// its environment names it (read once per process: ranks.Cache). A
// process a scenario made up has no environment to read. Within a job, a
// process known only by Slurm's task id while others have a launcher's
// rank (RANK, MPI's) is the launcher of those (torchrun under srun), not a
// rank.
func (s *Sampler) addRanks(smp *Reading) {
	if s.cfg.Environ == nil {
		return
	}
	var sim attrib.Simulator
	if s.cfg.Attributor != nil {
		sim, _ = s.cfg.Attributor.Src.(attrib.Simulator)
	}
	live := map[int]bool{}
	for i := range smp.Attrib.Jobs {
		j := &smp.Attrib.Jobs[i]
		places := make([]ranks.Place, len(j.Processes))
		launched := false
		for k := range j.Processes {
			p := &j.Processes[k]
			if p.Simulated || (sim != nil && sim.Simulated(p.PID)) {
				continue
			}
			live[p.PID] = true
			places[k] = s.places.Get(p.PID, p.StartTicks, s.cfg.Environ)
			if id := places[k].ID; id != nil && id.Source != ranks.SourceSlurm {
				launched = true
			}
		}
		for k, pl := range places {
			if pl.ID == nil || (launched && pl.ID.Source == ranks.SourceSlurm) {
				continue
			}
			p := &j.Processes[k]
			r := pl.ID.Rank
			p.Rank, p.LocalRank, p.WorldSize, p.Node, p.Group, p.RankFrom = &r, pl.ID.LocalRank, pl.ID.WorldSize, pl.Node, pl.Group, pl.ID.Source
			p.MemRequest = pl.MemRequest
		}
	}
	s.places.Keep(live)
}
