// The agent's live state as the API, /metrics and the dashboard read it: a consistent
// Snapshot and each job's view in it (its processes, GPUs and judgement).

package agent

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Snapshot is a consistent copy of the agent's live state.
type Snapshot struct {
	Time     time.Time
	Have     bool
	Backend  string
	Devices  []gpu.Device
	Dropped  gpu.DropCounts
	Took     time.Duration
	Jobs     []JobView
	Vanished uint64
	// VanishedGPUs is Vanished by GPU.
	VanishedGPUs []JobGPU
	Samples      uint64
	LastErr      error
	LastErrAt    time.Time
	ProbeRej     uint64
	ProbeMsgs    uint64
	Started      time.Time
	// Ranks are the ranks of distributed jobs on this node.
	Ranks []RankView
}

// JobView is one live job as the API shows it.
type JobView struct {
	Key     string `json:"key"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	RootPID int    `json:"root_pid"`
	// UID and User are the job's owner (its root process's).
	UID  int    `json:"uid"`
	User string `json:"user"`
	PIDs []int  `json:"pids"`
	// Processes are the job's processes; a distributed job's in rank
	// order (its launcher first, each rank's process before its workers).
	Processes []JobProcess `json:"processes"`
	RunID     string       `json:"run_id,omitempty"`
	Labels    Labels       `json:"labels"`
	Devices   []int        `json:"devices"`
	GPUBytes  uint64       `json:"gpu_bytes"`
	// GPUs is GPUBytes by GPU: what the driver reports for the job's
	// processes on each device.
	GPUs      []JobGPU   `json:"gpus"`
	RSSBytes  uint64     `json:"rss_bytes"`
	Alloc     *uint64    `json:"allocated_bytes,omitempty"`
	Reserved  *uint64    `json:"reserved_bytes,omitempty"`
	Limit     uint64     `json:"limit_bytes"`
	FirstSeen time.Time  `json:"first_seen"`
	LastCkpt  *time.Time `json:"last_checkpoint,omitempty"`
	CkptAgeS  *float64   `json:"seconds_since_checkpoint,omitempty"`
	Verdict   string     `json:"verdict,omitempty"`
	Leak      bool       `json:"leak"`
	// LeakStart is when the leak began, as the monitor first saw it.
	LeakStart *time.Time `json:"leak_start,omitempty"`
	// IdleS is how long the job has held GPU memory with its utilisation
	// under the idle threshold (0 while in use); Idle is set once that is
	// the idle window or longer.
	IdleS float64 `json:"idle_s"`
	Idle  bool    `json:"idle"`
	// OOMETA is the time left until the forecast OOM, counted down from
	// the newest forecast.
	OOMETA *float64 `json:"oom_eta_s,omitempty"`
	// Monitor is the monitor's summary of the job (a supervised run's own).
	Monitor *monitor.Summary `json:"monitor,omitempty"`
	// JudgingS is, while the verdict is insufficient_data, how many more
	// seconds of samples the leak detector needs before it can judge.
	JudgingS *float64   `json:"judging_s,omitempty"`
	Orphan   bool       `json:"orphan,omitempty"`
	Live     bool       `json:"live"`
	EndedAt  *time.Time `json:"ended_at,omitempty"`
	id       int64
}

// judgingLeft is how much longer the leak detector (with configuration
// cfg: the sampler's monitors use the default) needs samples every interval,
// having had n, before it can judge a job: cfg.MinLevels closed windows,
// each at least cfg.WindowS long and cfg.MinWindowSamples samples.
func judgingLeft(cfg analyze.Config, n int, interval time.Duration) time.Duration {
	if interval <= 0 {
		interval = time.Second
	}
	// a window of k samples spans (k-1) intervals; the next one starts with
	// the sample after its last
	per := max(int(math.Ceil(cfg.WindowS/interval.Seconds()))+1, cfg.MinWindowSamples)
	return time.Duration(max(cfg.MinLevels*per-n, 0)) * interval
}

// JobProcess is one process of a live job as the API shows it. Rank,
// LocalRank, WorldSize and Node are its place in a distributed job as its
// environment names it (absent: none).
type JobProcess struct {
	PID       int    `json:"pid"`
	UID       int    `json:"uid"`
	User      string `json:"user"`
	Comm      string `json:"comm"`
	Role      string `json:"role"`
	GPUBytes  uint64 `json:"gpu_bytes"`
	RSSBytes  uint64 `json:"rss_bytes"`
	Rank      *int   `json:"rank,omitempty"`
	LocalRank *int   `json:"local_rank,omitempty"`
	WorldSize *int   `json:"world_size,omitempty"`
	Node      string `json:"node,omitempty"`
}

// processesOf lists j's processes (in the attributor's order), a
// distributed job's in rank order: the
// processes with no rank (its launcher) first, then by rank, each rank's
// process before its workers.
func processesOf(j *attrib.Job) []JobProcess {
	out := make([]JobProcess, 0, len(j.Processes))
	for _, p := range j.Processes {
		out = append(out, JobProcess{PID: p.PID, UID: p.UID, User: p.User, Comm: p.Comm, Role: p.Role, GPUBytes: p.GPUBytes, RSSBytes: p.RSSBytes,
			Rank: p.Rank, LocalRank: p.LocalRank, WorldSize: p.WorldSize, Node: p.Node})
	}
	ranked := false
	for _, p := range out {
		ranked = ranked || p.Rank != nil
	}
	if !ranked {
		return out
	}
	order := func(p *JobProcess) int {
		if p.Rank == nil {
			return -1
		}
		return *p.Rank
	}
	sort.SliceStable(out, func(a, b int) bool {
		x, y := &out[a], &out[b]
		if ox, oy := order(x), order(y); ox != oy {
			return ox < oy
		}
		return x.Role != "worker" && y.Role == "worker"
	})
	return out
}

// JobGPU is a job's memory on one GPU.
type JobGPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Bytes uint64 `json:"bytes"`
}

// gpusOf sums the driver's records of j's processes by device, in the order
// of the devices' indexes (then UUIDs: MIG instances share their parent's).
func gpusOf(j *attrib.Job) []JobGPU {
	out := []JobGPU{}
	at := map[string]int{}
	for _, p := range j.Processes {
		for _, r := range p.GPU {
			i, ok := at[r.DeviceUUID]
			if !ok {
				i = len(out)
				at[r.DeviceUUID] = i
				out = append(out, JobGPU{Index: r.DeviceIndex, UUID: r.DeviceUUID})
			}
			out[i].Bytes += r.UsedBytes
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Index != out[b].Index {
			return out[a].Index < out[b].Index
		}
		return out[a].UUID < out[b].UUID
	})
	return out
}

// devicePoints is j's reading per GPU index, in index order: the memory
// the driver reports for its processes there and the SM utilisation it
// attributes to them (summed, at most 100; -1 when it reports none). A MIG
// instance counts for its GPU. nil for a job on no GPU.
func devicePoints(j *attrib.Job) []timeline.DevicePoint {
	var out []timeline.DevicePoint
	for _, p := range j.Processes {
		for _, r := range p.GPU {
			i := slices.IndexFunc(out, func(d timeline.DevicePoint) bool { return d.Index == r.DeviceIndex })
			if i < 0 {
				out = append(out, timeline.DevicePoint{Index: r.DeviceIndex, Util: -1})
				i = len(out) - 1
			}
			out[i].Bytes += int64(r.UsedBytes)
			if r.SMUtilPercent >= 0 {
				out[i].Util = min(max(out[i].Util, 0)+int64(r.SMUtilPercent), 100)
			}
		}
	}
	slices.SortFunc(out, func(a, b timeline.DevicePoint) int { return a.Index - b.Index })
	return out
}

// Snapshot returns the live state.
func (a *Agent) Snapshot() Snapshot {
	a.mu.RLock()
	defer a.mu.RUnlock()
	s := Snapshot{Time: a.latest.Time, Have: a.have, Backend: a.latest.Backend, Devices: a.latest.Devices,
		Dropped: a.latest.Dropped, Took: a.latest.Took, Vanished: a.latest.Attrib.VanishedBytes, Samples: a.samples,
		LastErr: a.lastErr, LastErrAt: a.lastErrAt, ProbeRej: a.probeRej, ProbeMsgs: a.probeMsgs, Started: a.start,
		Ranks: a.ranks}
	for _, v := range a.latest.Attrib.Vanished {
		i := slices.IndexFunc(s.VanishedGPUs, func(g JobGPU) bool { return g.UUID == v.DeviceUUID })
		if i < 0 {
			s.VanishedGPUs = append(s.VanishedGPUs, JobGPU{Index: v.DeviceIndex, UUID: v.DeviceUUID})
			i = len(s.VanishedGPUs) - 1
		}
		s.VanishedGPUs[i].Bytes += v.UsedBytes
	}
	now := a.latest.ProcessTime
	interval, _ := a.cfg.Sampler.Intervals()
	for _, js := range a.jobs {
		v := js.view(now, interval)
		v.IdleS, v.Idle = js.idleS, a.isIdle(js)
		s.Jobs = append(s.Jobs, v)
	}
	sort.Slice(s.Jobs, func(i, j int) bool {
		if s.Jobs[i].GPUBytes != s.Jobs[j].GPUBytes {
			return s.Jobs[i].GPUBytes > s.Jobs[j].GPUBytes
		}
		return s.Jobs[i].Key < s.Jobs[j].Key
	})
	return s
}

// view is the job as the API shows it; interval is the sampler's.
func (js *jobState) view(now time.Time, interval time.Duration) JobView {
	j := &js.Job
	v := JobView{Key: j.Key, Kind: j.Kind, Name: j.Name, RootPID: j.RootPID, UID: j.UID, User: j.User, RunID: j.RunID, Labels: js.Labels,
		Devices: j.Devices, GPUBytes: j.GPUBytes, GPUs: gpusOf(j), RSSBytes: j.RSSBytes, Alloc: j.AllocatedBytes, Reserved: j.ReservedBytes,
		Limit: js.Limit, FirstSeen: js.FirstSeen, Orphan: j.Orphan, Live: true, id: js.ID}
	for _, p := range j.Processes {
		v.PIDs = append(v.PIDs, p.PID)
	}
	v.Processes = processesOf(j)
	if !js.LastCkpt.IsZero() {
		t := js.LastCkpt
		age := now.Sub(t).Seconds()
		v.LastCkpt, v.CkptAgeS = &t, &age
	}
	if jd := js.Judged; jd != nil {
		sum := jd.Summary
		v.Monitor = &sum
		v.Verdict = sum.Verdict
		if sum.Verdict == string(analyze.VerdictInsufficientData) && jd.Own {
			left := judgingLeft(analyze.DefaultConfig(), sum.Samples, interval).Seconds()
			v.JudgingS = &left
		}
		if l := sum.Leak; l != nil && sum.Verdict == string(analyze.VerdictLeak) {
			v.Leak = true
			ls := l.LeakStart
			v.LeakStart = &ls
		}
		// the newest forecast, else the one the leak came with, counted down to now
		for _, f := range []*monitor.Finding{sum.Forecast, sum.Leak} {
			if f != nil && f.OOMAt != nil {
				eta := math.Max(0, f.OOMAt.Sub(now).Seconds())
				v.OOMETA = &eta
				break
			}
		}
	}
	return v
}
