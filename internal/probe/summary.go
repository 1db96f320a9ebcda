package probe

import (
	"slices"
	"time"

	"github.com/vramguard/vramguard/internal/postmortem"
)

// Summary folds a run's probe messages into the post-mortem's probe
// section (postmortem.Probe). The zero value is ready to use; Add is not
// safe for concurrent use.
type Summary struct {
	postmortem.Probe

	retries map[devKey]int64
	ooms    map[devKey]int64
}

type devKey struct{ pid, dev int }

// Checkpoint and OOM are the post-mortem's types.
type (
	Checkpoint = postmortem.Checkpoint
	OOM        = postmortem.OOM
)

// Add folds one message in.
func (s *Summary) Add(m Message) {
	if m.PID != 0 {
		if i, found := slices.BinarySearch(s.PIDs, m.PID); !found {
			s.PIDs = slices.Insert(s.PIDs, i, m.PID)
		}
	}
	switch m.Type {
	case TypeHello:
		if m.Torch != "" && s.TorchVersion == "" {
			s.TorchVersion = m.Torch
		}
	case TypeTorch:
		if m.Version != "" && s.TorchVersion == "" {
			s.TorchVersion = m.Version
		}
	case TypeSample:
		s.Samples++
		s.OptimizerSteps = max(s.OptimizerSteps, m.OptimizerSteps)
		s.UserSteps = max(s.UserSteps, m.UserSteps)
		s.PeakRSSBytes = max(s.PeakRSSBytes, m.RSSBytes)
		s.Dropped = max(s.Dropped, m.Dropped)
		s.addCUDA(m.PID, m.CUDA)
	case TypeCkpt:
		c := Checkpoint{Path: m.Path, Seconds: m.Seconds, T: m.Time().UTC(), PID: m.PID, Atomic: m.Atomic, Error: m.Error, Steps: m.OptimizerSteps,
			Autosave: m.Autosave, Objects: m.Objects}
		if m.Bytes != nil {
			c.Bytes = *m.Bytes
		}
		if m.WarnedAt > 0 {
			w := time.Unix(0, int64(m.WarnedAt*1e9)).UTC()
			c.WarnedAt, c.Signal = &w, m.Signal
			c.Fallback, c.FallbackS = m.Fallback, m.FallbackS
		}
		s.Checkpoints = append(s.Checkpoints, c)
		s.OptimizerSteps = max(s.OptimizerSteps, m.OptimizerSteps)
	case TypeOOM:
		s.addCUDA(m.PID, m.CUDA)
		if s.OOM == nil {
			s.OOM = &OOM{PID: m.PID, T: m.Time().UTC(), Source: m.Source, Device: m.Device, AllocBytes: m.AllocBytes,
				FreeBytes: m.FreeBytes, Message: m.Text, SummaryPath: m.SummaryPath, SnapshotPath: m.SnapshotPath}
		}
		s.OOM.Count++
	case TypeError:
		if len(s.Errors) < 20 {
			s.Errors = append(s.Errors, m.Where+": "+m.Error)
		}
	}
}

func (s *Summary) addCUDA(pid int, devs []DeviceStats) {
	for _, d := range devs {
		s.PeakAllocatedBytes = maxPtr(s.PeakAllocatedBytes, d.AllocatedPeakBytes)
		s.PeakReservedBytes = maxPtr(s.PeakReservedBytes, d.ReservedPeakBytes)
		// The counters are cumulative per process and device: keep the
		// latest of each and sum over them.
		if s.retries == nil {
			s.retries, s.ooms = map[devKey]int64{}, map[devKey]int64{}
		}
		k := devKey{pid, d.Device}
		s.retries[k] = max(s.retries[k], d.NumAllocRetries)
		s.ooms[k] = max(s.ooms[k], d.NumOOMs)
	}
	s.NumAllocRetries, s.NumOOMs = 0, 0
	for k := range s.retries {
		s.NumAllocRetries += s.retries[k]
		s.NumOOMs += s.ooms[k]
	}
}

func maxPtr(p *int64, v int64) *int64 {
	if p == nil || v > *p {
		return &v
	}
	return p
}
