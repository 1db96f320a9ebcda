// Package usage is GPU accounting over stored timelines: for each user,
// job or GPU, the GPU memory-hours held, the hours memory was held,
// busy and idle, the peak, and the jobs that died and why. It is a pure
// function of the samples it is given.
package usage

import (
	"cmp"
	"slices"
	"strconv"
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
	// Devices are the indexes of the GPUs the job held memory on, as its
	// record names them: ByGPU splits a sample without per-GPU readings
	// (Point.GPUs, stored before the agent kept them) evenly over them.
	Devices []int
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
	// By GPU they are that GPU's: the time the group's jobs held memory
	// on it, busy or idle by the utilisation attributed to them there.
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

// NoGPU is the group of jobs that held no GPU memory in the range (by
// GPU), and of jobs without a user or name.
const NoGPU = "-"

// Compute groups jobs by by and sums each group's samples; threshold is
// the utilisation (percent) under which held memory counts idle. Rows are
// ordered by memory-hours, largest first.
//
// By user and by job each job is in one row, and the total sums them. By
// GPU each GPU index is a row: the memory its jobs held on it, the hours
// they held memory there (busy or idle by their utilisation there), the
// most one job held there, and the deaths of jobs that held memory on it
// (a job on two GPUs is in both rows); the total's figures are the rows'
// sums (its hours are GPU-hours), its jobs and deaths each job's once.
func Compute(jobs []Job, by string, threshold int, from, to time.Time) Report {
	rows := map[string]*Row{}
	total := Row{Group: "total", DiedWhy: []string{}}
	add := func(g string, one Row, j Job) {
		r := rows[g]
		if r == nil {
			r = &Row{Group: g, DiedWhy: []string{}}
			rows[g] = r
		}
		r.Jobs++
		r.MemoryGiBHours += one.MemoryGiBHours
		r.HeldHours += one.HeldHours
		r.BusyHours += one.BusyHours
		r.IdleHours += one.IdleHours
		r.PeakBytes = max(r.PeakBytes, one.PeakBytes)
		r.Died += len(j.Died)
		r.DiedWhy = append(r.DiedWhy, j.Died...)
	}
	for _, j := range jobs {
		total.Jobs++
		total.Died += len(j.Died)
		total.DiedWhy = append(total.DiedWhy, j.Died...)
		var parts map[string]Row
		switch by {
		case ByGPU:
			parts = gpuRows(j, threshold)
		case ByJob:
			parts = map[string]Row{j.Name: jobRow(j, threshold)}
		default:
			parts = map[string]Row{j.User: jobRow(j, threshold)}
		}
		for g, one := range parts {
			if g == "" {
				g = NoGPU
			}
			add(g, one, j)
			total.MemoryGiBHours += one.MemoryGiBHours
			total.HeldHours += one.HeldHours
			total.BusyHours += one.BusyHours
			total.IdleHours += one.IdleHours
			total.PeakBytes = max(total.PeakBytes, one.PeakBytes)
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

// each calls f for every sample of j with the time it stands for: the time
// to the next one, at most its series' step (a longer hole had no samples:
// the job or the agent was not running), and the last one for one step.
func each(j Job, f func(p timeline.Point, h float64)) {
	for _, s := range j.Series {
		for i, p := range s.Points {
			dt := s.Step
			if i+1 < len(s.Points) {
				dt = min(dt, time.Duration(s.Points[i+1].T-p.T)*time.Millisecond)
			}
			f(p, dt.Hours())
		}
	}
}

const gib = float64(1 << 30)

// count adds a sample of memory bytes and utilisation util standing for h
// hours to r.
func (r *Row) count(bytes, util int64, threshold int, h float64) {
	r.PeakBytes = max(r.PeakBytes, bytes)
	if bytes <= 0 {
		return
	}
	r.MemoryGiBHours += float64(bytes) / gib * h
	r.HeldHours += h
	switch {
	case util < 0:
	case util < int64(threshold):
		r.IdleHours += h
	default:
		r.BusyHours += h
	}
}

// jobRow sums one job's samples.
func jobRow(j Job, threshold int) Row {
	var r Row
	each(j, func(p timeline.Point, h float64) { r.count(p.GPU, p.Util, threshold, h) })
	return r
}

// gpuRows sums one job's samples per GPU index: each sample's per-GPU
// readings, or for a sample without them (stored before the agent kept
// them) its total split evenly over the job's Devices, each at the job's
// utilisation. A job that held no memory on any GPU is NoGPU's.
func gpuRows(j Job, threshold int) map[string]Row {
	rows := map[string]*Row{}
	at := func(i int) *Row {
		g := strconv.Itoa(i)
		if rows[g] == nil {
			rows[g] = &Row{}
		}
		return rows[g]
	}
	each(j, func(p timeline.Point, h float64) {
		switch {
		case len(p.GPUs) > 0:
			for _, d := range p.GPUs {
				at(d.Index).count(d.Bytes, d.Util, threshold, h)
			}
		case p.GPU > 0 && len(j.Devices) > 0:
			for _, i := range j.Devices {
				at(i).count(p.GPU/int64(len(j.Devices)), p.Util, threshold, h)
			}
		}
	})
	out := map[string]Row{}
	for g, r := range rows {
		if r.PeakBytes > 0 {
			out[g] = *r
		}
	}
	if len(out) == 0 {
		out[NoGPU] = jobRow(j, threshold)
	}
	return out
}
