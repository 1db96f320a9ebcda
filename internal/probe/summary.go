package probe

import (
	"encoding/json"
	"slices"
	"time"
)

// Summary folds a run's probe messages into the "probe" object of
// `vramguard explain --json`. The zero value is ready to use; Add is not safe
// for concurrent use.
//
// Steps are per process: OptimizerSteps is the largest count any one process
// reported (data-parallel ranks each count their own steps; forked DataLoader
// workers count none), not a sum.
type Summary struct {
	Samples            int          `json:"samples"`
	OptimizerSteps     int64        `json:"optimizer_steps"`
	UserSteps          int64        `json:"user_steps"`
	PeakAllocatedBytes *int64       `json:"peak_allocated_bytes"` // max over processes and devices; null without CUDA
	PeakReservedBytes  *int64       `json:"peak_reserved_bytes"`
	PeakRSSBytes       int64        `json:"peak_rss_bytes"` // largest RSS of any one process
	NumAllocRetries    int64        `json:"num_alloc_retries"`
	NumOOMs            int64        `json:"num_ooms"`
	Checkpoints        []Checkpoint `json:"checkpoints"`
	OOM                *OOM         `json:"oom"` // the first CUDA OOM; null when none
	Errors             []string     `json:"errors,omitempty"`
	Dropped            int64        `json:"dropped,omitempty"`
	PIDs               []int        `json:"pids"`

	retries map[devKey]int64
	ooms    map[devKey]int64
}

type devKey struct{ pid, dev int }

// Checkpoint is one torch.save the probe saw.
type Checkpoint struct {
	Path    string    `json:"path"`
	Bytes   int64     `json:"bytes"`
	Seconds float64   `json:"seconds"`
	T       time.Time `json:"t"`
	PID     int       `json:"pid"`
	Atomic  bool      `json:"atomic,omitempty"`
	Error   string    `json:"error,omitempty"` // the save raised; Bytes is 0
	Steps   int64     `json:"optimizer_steps"` // the process's count at the save
}

// OOM is a CUDA out-of-memory error the probe saw.
type OOM struct {
	PID          int       `json:"pid"`
	T            time.Time `json:"t"`
	Source       string    `json:"source"`
	Device       *int      `json:"device"`
	AllocBytes   *int64    `json:"alloc_bytes"`
	FreeBytes    *int64    `json:"free_bytes,omitempty"`
	Message      string    `json:"message,omitempty"`
	SummaryPath  string    `json:"summary_path,omitempty"`
	SnapshotPath string    `json:"snapshot_path,omitempty"`
	Count        int       `json:"count"` // OOM events from all processes
}

// Add folds one message in.
func (s *Summary) Add(m Message) {
	if m.PID != 0 {
		if i, found := slices.BinarySearch(s.PIDs, m.PID); !found {
			s.PIDs = slices.Insert(s.PIDs, i, m.PID)
		}
	}
	switch m.Type {
	case TypeSample:
		s.Samples++
		s.OptimizerSteps = max(s.OptimizerSteps, m.OptimizerSteps)
		s.UserSteps = max(s.UserSteps, m.UserSteps)
		s.PeakRSSBytes = max(s.PeakRSSBytes, m.RSSBytes)
		s.Dropped = max(s.Dropped, m.Dropped)
		s.addCUDA(m.PID, m.CUDA)
	case TypeCkpt:
		c := Checkpoint{Path: m.Path, Seconds: m.Seconds, T: m.Time().UTC(), PID: m.PID, Atomic: m.Atomic, Error: m.Error, Steps: m.OptimizerSteps}
		if m.Bytes != nil {
			c.Bytes = *m.Bytes
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

// MarshalJSON writes empty lists as [] rather than null.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary
	p := plain(s)
	if p.Checkpoints == nil {
		p.Checkpoints = []Checkpoint{}
	}
	if p.PIDs == nil {
		p.PIDs = []int{}
	}
	return json.Marshal(p)
}

// LastCheckpoint returns the time of the latest successful save, for the
// --unsaved-warning clock; ok is false when there was none.
func (s *Summary) LastCheckpoint() (t time.Time, ok bool) {
	for _, c := range s.Checkpoints {
		if c.Error == "" && c.T.After(t) {
			t, ok = c.T, true
		}
	}
	return t, ok
}
