package sampler

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/timeline"
)

// A job's process tree, read for `vramguard run`: the supervisor subscribes
// to its job here instead of reading /proc and the GPU itself, so one Sampler
// stays the only thing that asks the driver for processes.
//
// The figures and what they mean (docs/FAILURES.md, "Memory figures"):
//
//   - RSS: VmRSS summed over the live processes below Root. A page shared by
//     forked processes (a DataLoader worker and its parent) counts once per
//     process, so the sum overstates a forking job.
//   - PSS: proportional set size summed over the same processes: a shared
//     page is split among its sharers, so the sum counts every page once.
//     It is the tree figure vramguard reports when smaps_rollup is readable.
//   - CgroupUsage/CgroupLimit: the job's OWN cgroup (--memory-limit) only,
//     page cache included; a cgroup the job merely sits in is never
//     reported as the job's.
//   - Limit: the tightest memory limit on the job's cgroup path, else the
//     host's RAM; TreeInfo.LimitCgroup names the cgroup that sets it and
//     LimitUsage is what that limit is enforced on (its charge).

// JobSpec names a job's process tree and where to read it.
type JobSpec struct {
	// Root is the process whose descendants are the job (the supervisor's
	// shim); Root itself is not counted.
	Root int
	// Main is the job's main process: its cgroup path gives the limit in
	// force. 0: the first process below Root.
	Main int
	// Cgroup is the directory of the job's own memory cgroup (made for it by
	// --memory-limit), "" when it has none; CgroupVersion is 1 or 2.
	Cgroup        string
	CgroupVersion int
	// OwnLimitSource names a limit set on Cgroup (default "--memory-limit").
	OwnLimitSource string
	// Proc and Cgroups are the /proc and cgroup trees to read (zero: live).
	Proc    procfs.FS
	Cgroups cgroup.Reader
	// MaxProcs caps TreeInfo.Procs and timeline.Sample.Procs (default 64).
	MaxProcs int
	// RankOf gives a process's rank as torch.distributed knows it (the
	// probe's view), which wins over its environment's; nil: none.
	RankOf func(pid int) *ranks.Identity
}

// ProcReading is one process of the tree at one reading.
type ProcReading struct {
	PID  int    `json:"pid"`
	PPID int    `json:"ppid"`
	Comm string `json:"comm"`
	RSS  uint64 `json:"rss_bytes"`
	// PSS is nil when smaps_rollup could not be read. Between two reads
	// (the PSS budget, rollup.go) it is the last read's plus the change in
	// RSS since, and PSSReadAt (Unix milliseconds) says when that read
	// was; it is 0 when the rollup was read for this reading.
	PSS       *uint64 `json:"pss_bytes,omitempty"`
	PSSReadAt int64   `json:"pss_read_at,omitempty"`
	GPU       uint64  `json:"gpu_bytes,omitempty"`
	// Rank is the process's place in a distributed job: from
	// torch.distributed (JobSpec.RankOf), else its environment (RANK,
	// SLURM_PROCID, …, read once per process); nil when it has none. A
	// DataLoader worker carries its rank's environment, so its rank.
	Rank *ranks.Identity `json:"rank,omitempty"`
}

// TreeInfo is what a reading saw beyond its timeline.Sample.
type TreeInfo struct {
	// PIDs are the job's live processes (zombies left out).
	PIDs  []int
	Procs []ProcReading
	// CgroupPeak is the high-water mark the kernel kept for the job's own
	// cgroup (memory.peak on v2, memory.max_usage_in_bytes on v1), 0 when it
	// has none or the kernel keeps none; CgroupOOMKills its oom_kill count.
	CgroupPeak     uint64
	CgroupOOMKills uint64
	// LimitCgroup is the directory of the cgroup whose limit is
	// timeline.Sample.Limit ("" for the host's RAM); LimitUsage is that cgroup's
	// charge now (page cache and any other process in it included): what
	// the kernel compares with the limit.
	LimitCgroup string
	LimitUsage  uint64
	// LimitHighWater is the high-water mark the kernel keeps for that
	// cgroup (memory.peak, memory.max_usage_in_bytes), since its creation:
	// a rise during the job is the job's doing, or its neighbours'.
	LimitHighWater uint64
	// GPUTime is when the GPU process list used was read (zero: none).
	GPUTime time.Time
	// Env is what the environment of each live process says of its place
	// in a distributed job, for the processes whose environment names a
	// rank or torchrun's error file.
	Env map[int]ranks.Env
}

// JobWatch reads one job's tree. It keeps the last limit found, so a
// reading after the main process ended still has one. Not safe for
// concurrent use.
type JobWatch struct {
	s         *Sampler
	spec      JobSpec
	limit     uint64
	limitSrc  string
	limitDir  string
	limitVer  int
	hostTotal uint64
	gpuTried  time.Time
	// envs caches what each process's environment says (read once per
	// process: by PID and start time)
	envs map[int]envEntry
	// rollups keeps each process's last smaps_rollup read and the budget
	// for the next (rollup.go)
	rollups rollups
}

type envEntry struct {
	start uint64
	env   ranks.Env
}

// WatchJob returns a reader of the job's tree.
func (s *Sampler) WatchJob(spec JobSpec) *JobWatch {
	if spec.MaxProcs <= 0 {
		spec.MaxProcs = 64
	}
	if spec.OwnLimitSource == "" {
		spec.OwnLimitSource = "--memory-limit"
	}
	return &JobWatch{s: s, spec: spec}
}

// Tree reads the job's tree once; see JobWatch.Read.
func (s *Sampler) Tree(ctx context.Context, spec JobSpec) (timeline.Sample, TreeInfo, error) {
	return s.WatchJob(spec).Read(ctx)
}

// ErrNoProcesses means no live process was below Root.
var ErrNoProcesses = errors.New("no live process in the job's tree")

// Read reads the tree below Root now: its processes from /proc, PSS from
// smaps_rollup, its own cgroup, the limit in force, and GPU memory per
// process from the Sampler's shared process list (refreshed at most once
// per process interval, whoever asks). timeline.Sample.Attempt is left 0.
func (w *JobWatch) Read(ctx context.Context) (timeline.Sample, TreeInfo, error) {
	var info TreeInfo
	sp := w.spec
	all, err := sp.Proc.All()
	if err != nil {
		return timeline.Sample{}, info, err
	}
	tree := procfs.Tree(all, sp.Root)
	if len(tree) > 0 {
		tree = tree[1:]
	}
	now := w.s.cfg.Now()
	x := timeline.Sample{T: now}
	var pss uint64
	pssOK := true
	readRollup := w.rollups.plan(tree)
	index := make(map[int]int, len(tree))
	for _, p := range tree {
		if p.State == "Z" {
			continue
		}
		r := ProcReading{PID: p.PID, PPID: p.PPID, Comm: p.Comm, RSS: p.RSSBytes}
		if e := w.env(p); e.Identity != nil || e.ErrorFile != "" {
			if info.Env == nil {
				info.Env = map[int]ranks.Env{}
			}
			info.Env[p.PID] = e
			r.Rank = e.Identity
		}
		if sp.RankOf != nil {
			if id := sp.RankOf(p.PID); id != nil {
				merged := *id
				if env := r.Rank; env != nil {
					// what only the environment says: the node, the local rank
					if merged.LocalRank == nil {
						merged.LocalRank = env.LocalRank
					}
					if merged.NodeRank == nil {
						merged.NodeRank = env.NodeRank
					}
				}
				r.Rank = &merged
			}
		}
		var roll procfs.Rollup
		var err error
		if readRollup[p.PID] {
			roll, err = w.rollups.read(sp.Proc, p, now)
		} else if est, at, ok := w.rollups.estimate(p); ok {
			roll = procfs.Rollup{RSS: p.RSSBytes, PSS: est} // stat's RSS; PSS from the last read (rollup.go)
			r.PSSReadAt = at.UnixMilli()
		} else {
			roll, err = w.rollups.read(sp.Proc, p, now)
		}
		switch {
		case err == nil && roll.RSS > 0:
			// a read gives both figures at the same instant
			r.RSS = roll.RSS
			v := roll.PSS
			r.PSS = &v
			pss += v
		case err == nil || ended(sp.Proc, p.PID):
			continue // it ended (or let go of its memory) between the two reads
		case p.RSSBytes == 0:
			continue // no memory left to it: being killed, its pages already reaped
		default: // unreadable (another user's process): stat's RSS only
			pssOK = false
		}
		x.RSS += r.RSS
		x.CPUTicks += p.CPUTicks
		index[p.PID] = len(info.Procs)
		info.Procs = append(info.Procs, r)
		info.PIDs = append(info.PIDs, p.PID)
	}
	if len(w.envs) > 2*len(tree)+64 {
		forgetGone(w.envs, tree)
	}
	x.NProcs = len(info.Procs)
	if x.NProcs == 0 {
		return x, info, ErrNoProcesses
	}
	if pssOK {
		x.PSS = timeline.U(pss)
	}

	if sp.Cgroup != "" {
		if m, err := cgroup.ReadMemory(sp.Cgroup, sp.CgroupVersion); err == nil {
			x.CgroupUsage = timeline.U(m.Usage)
			if m.Limit > 0 {
				x.CgroupLimit = timeline.U(m.Limit)
			}
			info.CgroupPeak, info.CgroupOOMKills = m.Peak, m.OOMKills
		}
	}
	main := sp.Main
	if main == 0 {
		main = info.PIDs[0]
	}
	w.readLimit(main)
	x.Limit, x.LimitSource = w.limit, w.limitSrc
	info.LimitCgroup = w.limitDir
	if w.limitDir != "" {
		if w.limitDir == sp.Cgroup && x.CgroupUsage != nil {
			info.LimitUsage, info.LimitHighWater = *x.CgroupUsage, info.CgroupPeak
		} else if m, err := cgroup.ReadMemory(w.limitDir, w.limitVer); err == nil {
			info.LimitUsage, info.LimitHighWater = m.Usage, m.Peak
		}
	}

	if devs, procs, at, ok := w.gpu(ctx); ok {
		info.GPUTime = at
		var used, total uint64
		onDev := map[string]bool{}
		for _, g := range procs {
			if i, ok := index[g.PID]; ok {
				used += g.UsedBytes
				info.Procs[i].GPU += g.UsedBytes
				onDev[g.DeviceUUID] = true
			}
		}
		for _, d := range devs {
			if onDev[d.UUID] {
				total += d.TotalBytes
			}
		}
		x.GPUUsed = timeline.U(used)
		if total > 0 {
			x.GPUTotal = timeline.U(total)
		}
	}

	procs := info.Procs
	if len(procs) > sp.MaxProcs {
		procs = procs[:sp.MaxProcs]
	}
	x.Procs, _ = json.Marshal(procs)
	return x, info, nil
}

// env reads what p's environment says of its place in a job, once per
// process.
func (w *JobWatch) env(p procfs.Proc) ranks.Env {
	if e, ok := w.envs[p.PID]; ok && e.start == p.StartTicks {
		return e.env
	}
	if w.envs == nil {
		w.envs = map[int]envEntry{}
	}
	var e ranks.Env
	if env, err := w.spec.Proc.Environ(p.PID); err == nil {
		e = ranks.ReadEnv(env)
	}
	w.envs[p.PID] = envEntry{start: p.StartTicks, env: e}
	return e
}

// readLimit finds the limit in force: the tightest cgroup limit on main's
// path (its own cgroup's or an ancestor's), else the host's RAM.
func (w *JobWatch) readLimit(main int) {
	sp := w.spec
	if l, err := sp.Cgroups.LimitsOf(main); err == nil {
		if l.MemoryBytes > 0 && l.MemoryFile != "" {
			dir := filepath.Dir(l.MemoryFile)
			if sp.Cgroups.Root != "" {
				dir = filepath.Join(sp.Cgroups.Root, dir)
			}
			ver := 2
			if filepath.Base(l.MemoryFile) == "memory.limit_in_bytes" {
				ver = 1
			}
			w.limit, w.limitDir, w.limitVer, w.limitSrc = l.MemoryBytes, dir, ver, "cgroup"
			if sp.Cgroup != "" && filepath.Clean(dir) == filepath.Clean(sp.Cgroup) {
				w.limitDir, w.limitSrc = sp.Cgroup, sp.OwnLimitSource
			}
			return
		}
		if w.limitSrc != "host" && w.limit > 0 {
			return // main moved out of sight; keep what was found
		}
	} else if w.limit > 0 {
		return
	}
	if w.hostTotal == 0 {
		if mi, err := sp.Proc.MemInfo(); err == nil {
			w.hostTotal = mi.Total
		}
	}
	if w.hostTotal > 0 {
		w.limit, w.limitSrc, w.limitDir = w.hostTotal, "host", ""
	}
}

// treeRefresh serialises refreshes asked for by job readers, so that two
// jobs finding the shared process list stale query the driver once.
var treeRefresh sync.Mutex

// gpu returns the Sampler's shared device and process lists, refreshing
// them when they are older than the process interval. ok is false when
// there are no devices or the lists cannot be read.
func (w *JobWatch) gpu(ctx context.Context) ([]gpu.Device, []gpu.Process, time.Time, bool) {
	s := w.s
	fresh := func() (Reading, bool) {
		smp, ok := s.Latest()
		return smp, ok && s.cfg.Now().Sub(smp.ProcessTime) < s.cfg.ProcessInterval
	}
	smp, ok := fresh()
	if !ok && s.cfg.Now().Sub(w.gpuTried) >= s.cfg.ProcessInterval {
		treeRefresh.Lock()
		if smp, ok = fresh(); !ok {
			w.gpuTried = s.cfg.Now()
			var err error
			smp, err = s.Refresh(ctx)
			ok = err == nil
		}
		treeRefresh.Unlock()
	}
	if !ok {
		// a failed or rate-limited refresh: the last list, if any
		smp, ok = s.Latest()
	}
	if !ok || len(smp.Devices) == 0 {
		return nil, nil, time.Time{}, false
	}
	return smp.Devices, smp.Processes, smp.ProcessTime, true
}

// ended reports whether pid has ended (or is ending: a zombie, or dead
// while its /proc files are torn down), read again after a failed read.
func ended(fs procfs.FS, pid int) bool {
	p, err := fs.Proc(pid)
	return err != nil || p.State == "Z" || p.State == "X" || p.State == "x"
}
