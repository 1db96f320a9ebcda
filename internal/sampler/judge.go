package sampler

import (
	"context"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/users"
)

// RunSource supplies the supervised runs in progress, as their own
// timelines record them (runctl.Hints implements it).
type RunSource interface {
	Running(ctx context.Context) []timeline.RunState
}

// ProbeSource knows what PyTorch's allocator inside a process reports, from
// the in-process probe (the agent's probe registry implements it).
type ProbeSource interface {
	ProbeMemory(pid int) (allocated, reserved uint64, ok bool)
}

// addProbes sums the probe's figures over each job's processes.
func (s *Sampler) addProbes(smp *Reading) {
	if s.cfg.Probes == nil {
		return
	}
	for i := range smp.Attrib.Jobs {
		j := &smp.Attrib.Jobs[i]
		for _, p := range j.Processes {
			if al, rs, ok := s.cfg.Probes.ProbeMemory(p.PID); ok {
				if j.AllocatedBytes == nil {
					j.AllocatedBytes, j.ReservedBytes = new(uint64), new(uint64)
				}
				*j.AllocatedBytes += al
				*j.ReservedBytes += rs
			}
		}
	}
}

// Judgement is what the monitor concluded for one job. A supervised run is
// judged by its own supervisor's monitor (Own false: the summary is rebuilt
// from the run's findings, and the run raised its own events); any other
// job by a monitor this sampler keeps for it, whose new events are in
// Events.
type Judgement struct {
	Summary monitor.Summary
	Own     bool
	Events  []timeline.Event
}

// addRuns makes every supervised run in progress a job of smp, GPU memory
// or not: a run training on the CPU (or not yet on a GPU) is still a job to
// watch. Its host and allocator figures come from its own newest sample.
func (s *Sampler) addRuns(ctx context.Context, smp *Reading) {
	if s.cfg.Runs == nil {
		return
	}
	smp.Runs = s.cfg.Runs.Running(ctx)
	have := make(map[string]int, len(smp.Attrib.Jobs))
	for i, j := range smp.Attrib.Jobs {
		have[j.Key] = i
	}
	for _, r := range smp.Runs {
		key := "run:" + r.ID
		i, ok := have[key]
		if !ok {
			// its owner is the run's (its supervisor's user), GPU or not
			j := attrib.Job{Key: key, Kind: attrib.KindRun, Name: r.Name, RootPID: r.JobPID, RunID: r.ID,
				Devices: []int{}, Processes: []attrib.Process{}, UID: r.UID, User: users.Unknown}
			if r.UID >= 0 && s.cfg.Attributor != nil {
				j.User = s.cfg.Attributor.UserName(r.UID)
			}
			smp.Attrib.Jobs = append(smp.Attrib.Jobs, j)
			i = len(smp.Attrib.Jobs) - 1
		}
		j := &smp.Attrib.Jobs[i]
		if x := r.Latest; x != nil {
			if !ok {
				j.RSSBytes = x.RSS
			}
			if j.AllocatedBytes == nil {
				j.AllocatedBytes, j.ReservedBytes = x.Allocated, x.Reserved
			}
		}
	}
}

// judge sets j's flags from its judgement and records the judgement. s.mu
// is held.
func (s *Sampler) judge(j *attrib.Job, smp *Reading, now time.Time, totals map[int]uint64) {
	if smp.Judged == nil {
		smp.Judged = map[string]*Judgement{}
	}
	if j.RunID != "" {
		for _, r := range smp.Runs {
			if r.ID == j.RunID {
				jd := &Judgement{Summary: monitor.FromFindings(r.Findings)}
				smp.Judged[j.Key] = jd
				j.Flags = jd.Summary.Flags(now)
				return
			}
		}
	}
	m := s.mons[j.Key]
	if m == nil {
		m = monitor.New(monitor.Config{NearLimit: -1, OOMWarning: s.cfg.OOMWarning}, now)
		s.mons[j.Key] = m
	}
	x := timeline.Sample{T: now, RSS: j.RSSBytes, NProcs: len(j.Processes), GPUUsed: timeline.U(j.GPUBytes),
		Allocated: j.AllocatedBytes, Reserved: j.ReservedBytes}
	var total uint64
	for _, d := range j.Devices {
		total += totals[d]
	}
	if total > 0 {
		x.GPUTotal = &total
	}
	jd := &Judgement{Own: true, Events: m.Observe(&x), Summary: m.Summary()}
	smp.Judged[j.Key] = jd
	j.Flags = jd.Summary.Flags(now)
}
