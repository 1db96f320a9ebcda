// Package timeline is the one model of what vramguard observes about a job:
// a Sample is one reading of a job's memory (host, cgroup, GPU and PyTorch's
// allocator), an Event is something that happened to it at a moment, and
// Kind names every event vramguard raises. Sources (the sampler, the probe,
// the job's output) produce them; the monitor turns samples into events;
// sinks (terminal, store, API, metrics) read them. The package holds data
// and pure conversions only: it reads nothing and imports nothing of ours
// (analyses import it, never the other way).
package timeline

import (
	"encoding/json"
	"time"
)

// Sample is one reading of a job's memory. Optional figures are nil when
// their source was absent (no cgroup of its own, no GPU process, no probe).
type Sample struct {
	Attempt int       `json:"attempt"`
	T       time.Time `json:"t"`
	// RSS is the resident set of the job's process tree: VmRSS summed over
	// its live processes (what the kernel's OOM killer and a cgroup charge
	// are closest to; pages shared between processes count once per
	// process). PSS is the proportional set size summed over the same
	// processes (shared pages split between their sharers), nil when
	// /proc/PID/smaps_rollup could not be read.
	RSS    uint64  `json:"rss_bytes"`
	PSS    *uint64 `json:"pss_bytes,omitempty"`
	NProcs int     `json:"nprocs"`
	// CgroupUsage is memory.current (v2) or memory.usage_in_bytes (v1) of
	// the job's own cgroup (--memory-limit), page cache included; nil when
	// the job has none of its own.
	CgroupUsage *uint64 `json:"cgroup_usage_bytes"`
	CgroupLimit *uint64 `json:"cgroup_limit_bytes"`
	// Limit is the host memory limit in force for the job (the tightest
	// cgroup limit on its path, else the host's RAM), LimitSource says
	// which ("--memory-limit", "cgroup", "host"); 0 when unknown.
	Limit       uint64 `json:"limit_bytes,omitempty"`
	LimitSource string `json:"limit_source,omitempty"`
	// GPUUsed is NVML's used memory summed over the job's processes;
	// GPUTotal the total memory of the devices they use.
	GPUUsed  *uint64 `json:"gpu_used_bytes"`
	GPUTotal *uint64 `json:"gpu_total_bytes,omitempty"`
	CPUTicks uint64  `json:"cpu_ticks"`
	// PyTorch's own figures from the probe, summed over the job's probed
	// processes: torch.cuda.memory_allocated/reserved, inactive split bytes
	// and the allocator's cumulative retries.
	Allocated     *uint64 `json:"allocated_bytes"`
	Reserved      *uint64 `json:"reserved_bytes"`
	InactiveSplit *uint64 `json:"inactive_split_bytes,omitempty"`
	AllocRetries  *uint64 `json:"alloc_retries,omitempty"`
	// Step is the newest optimizer step the probe reported, nil when none.
	Step *int64 `json:"step,omitempty"`
	// Procs is a JSON list of per-process readings.
	Procs json.RawMessage `json:"procs,omitempty"`
}

// U returns a pointer to v, for the optional figures.
func U(v uint64) *uint64 { return &v }

// RunState is a supervised run in progress as its own timeline records it:
// the newest sample of its current attempt and the monitor's findings
// (leak and oom_forecast events) for that attempt. Views that do not
// supervise the run (top, serve) show these rather than judge it again, so
// a run has one verdict everywhere.
type RunState struct {
	ID     string
	Name   string
	JobPID int
	// UID is the run's owner: its supervisor's user, as the kernel
	// records it (users.NoUID when unknown).
	UID          int
	Attempt      int
	AttemptStart time.Time
	// Latest is the attempt's newest sample, nil before the first.
	Latest *Sample
	// Findings are the attempt's leak and oom_forecast events, oldest first.
	Findings []Event
}

// Point is the compact form of a sample that views keep by the thousand:
// the dashboard's stored timelines, top's sparklines. Alloc and Reserved
// are PyTorch's own figures, -1 when no probe reported them; Util is the
// SM utilisation (percent) the driver attributes to the job's processes,
// -1 when it reports none. GPUs, where the agent recorded it, is the same
// by GPU (nil where it was not: before the agent kept it, and in views
// that need the job's total only).
type Point struct {
	T        int64         `json:"t"` // Unix milliseconds
	GPU      int64         `json:"gpu"`
	RSS      int64         `json:"rss"`
	Alloc    int64         `json:"alloc"`
	Reserved int64         `json:"reserved"`
	Util     int64         `json:"util"`
	GPUs     []DevicePoint `json:"gpus,omitempty"`
}

// DevicePoint is a job's reading on one GPU: the memory the driver reports
// for its processes there and their SM utilisation (percent, at most 100;
// -1 when the driver reports none). A MIG instance counts for its GPU
// (Index is the GPU's).
type DevicePoint struct {
	Index int   `json:"index"`
	Bytes int64 `json:"bytes"`
	Util  int64 `json:"util"`
}
