// Package usage is GPU accounting over stored timelines: for each user,
// job or set of GPUs, the GPU memory-hours held, the hours memory was held,
// busy and idle, the peak, and the jobs that died and why. It is a pure
// function of the samples it is given.
package usage

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

// Groupings a Report is made by.
const (
	ByUser = "user"
	ByJob  = "job"
	ByGPU  = "gpu"
)

// Bys lists the groupings.
var Bys = []string{ByUser, ByJob, ByGPU}

// Job is one job's stored history.
type Job struct {
	Key  string
	Name string
	User string
	// GPUs names the GPUs the job held memory on ("0,1"); it is the group
	// of ByGPU (a job's samples hold its total over its GPUs, not each
	// GPU's share).
	GPUs string
	// Series are the job's samples, each with the longest stretch one
	// sample may stand for (Step): every sample (the sampling interval)
	// and, beyond the fine retention, per-step peaks (the coarse step).
	Series []Series
	// Died are the reasons of the job's deaths in the range.
	Died []string
}

// Series is samples taken Step apart.
type Series struct {
	Step   time.Duration
	Points []timeline.Point
}

// Row is one group's figures.
type Row struct {
	Group string `json:"group"`
	Jobs  int    `json:"jobs"`
	// MemoryGiBHours is GPU memory held over time: the sum over samples
	// of memory × the time the sample stands for.
	MemoryGiBHours float64 `json:"memory_gib_hours"`
	// HeldHours is the time some GPU memory was held; BusyHours the part
	// of it at or above the idle threshold's utilisation, IdleHours the
	// part under it (time without a utilisation reading is in neither).
	HeldHours float64 `json:"held_hours"`
	BusyHours float64 `json:"busy_hours"`
	IdleHours float64 `json:"idle_hours"`
	PeakBytes int64   `json:"peak_bytes"`
	Died      int     `json:"died"`
	// DiedWhy are the deaths' reasons, as their events give them.
	DiedWhy []string `json:"died_why"`
}

// Report is the accounting of a range.
type Report struct {
	By    string    `json:"by"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	Rows  []Row     `json:"rows"`
	Total Row       `json:"total"`
}

// Compute groups jobs by by and sums each group's samples; threshold is
// the utilisation (percent) under which held memory counts idle. Rows are
// ordered by memory-hours, largest first.
func Compute(jobs []Job, by string, threshold int, from, to time.Time) Report {
	rows := map[string]*Row{}
	total := Row{Group: "total", DiedWhy: []string{}}
	for _, j := range jobs {
		g := j.User
		switch by {
		case ByJob:
			g = j.Name
		case ByGPU:
			g = j.GPUs
		}
		if g == "" {
			g = "-"
		}
		r := rows[g]
		if r == nil {
			r = &Row{Group: g, DiedWhy: []string{}}
			rows[g] = r
		}
		one := jobRow(j, threshold)
		for _, x := range []*Row{r, &total} {
			x.Jobs++
			x.MemoryGiBHours += one.MemoryGiBHours
			x.HeldHours += one.HeldHours
			x.BusyHours += one.BusyHours
			x.IdleHours += one.IdleHours
			x.PeakBytes = max(x.PeakBytes, one.PeakBytes)
			x.Died += len(j.Died)
			x.DiedWhy = append(x.DiedWhy, j.Died...)
		}
	}
	out := Report{By: by, From: from, To: to, Rows: []Row{}, Total: total}
	for _, r := range rows {
		out.Rows = append(out.Rows, *r)
	}
	slices.SortFunc(out.Rows, func(a, b Row) int {
		if c := cmp.Compare(b.MemoryGiBHours, a.MemoryGiBHours); c != 0 {
			return c
		}
		return strings.Compare(a.Group, b.Group)
	})
	return out
}

// jobRow sums one job's series: each sample stands for the time to the
// next one, at most its series' step (a longer hole had no samples: the
// job or the agent was not running), and the last one for one step.
func jobRow(j Job, threshold int) Row {
	var r Row
	const gib = float64(1 << 30)
	for _, s := range j.Series {
		for i, p := range s.Points {
			dt := s.Step
			if i+1 < len(s.Points) {
				dt = min(dt, time.Duration(s.Points[i+1].T-p.T)*time.Millisecond)
			}
			h := dt.Hours()
			r.PeakBytes = max(r.PeakBytes, p.GPU)
			if p.GPU <= 0 {
				continue
			}
			r.MemoryGiBHours += float64(p.GPU) / gib * h
			r.HeldHours += h
			switch {
			case p.Util < 0:
			case p.Util < int64(threshold):
				r.IdleHours += h
			default:
				r.BusyHours += h
			}
		}
	}
	return r
}
