// Package postmortem is the one typed account of how an attempt ended: the
// reason and its evidence (diagnose), the memory it used, what the monitor
// concluded, what the in-process probe saw, and where it resumed from. The
// terminal post-mortem of `vramguard run`, `vramguard explain` (text and
// --json) and `GET /api/v1/runs/{id}` all render these types; docs/CLI.md
// documents every JSON field. It reads the store to assemble a run's
// document and writes only to the writers it is given.
package postmortem

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/vramguard/vramguard/internal/adapt"
	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/ranks"
)

// Postmortem is the full account of how an attempt ended.
type Postmortem struct {
	diagnose.Verdict
	RunID     string    `json:"run_id"`
	Name      string    `json:"name"`
	Command   []string  `json:"command"`
	Attempt   int       `json:"attempt"`
	Attempts  int       `json:"attempts"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	DurationS float64   `json:"duration_s"`
	LogPath   string    `json:"log_path"`
	Memory    MemStats  `json:"memory"`
	Resume    *Resume   `json:"resume"`
	// RestartDecision says why the run was (not) restarted after this attempt.
	RestartDecision string `json:"restart_decision,omitempty"`
	// Monitor is what the monitor concluded over the attempt: the verdict,
	// when a leak was first seen and the OOM forecast then; null when the
	// attempt was not sampled.
	Monitor *monitor.Summary `json:"monitor"`
	// Probe is the in-process probe's summary, null when no probe reported.
	Probe *Probe `json:"probe"`
	// AllocationSites are the largest allocation sites at a CUDA OOM (from
	// the probe's snapshot, --oom-snapshot); AllocationSitesError says why
	// they could not be read.
	AllocationSites      []AllocSite `json:"oom_allocation_sites,omitempty"`
	AllocationSitesError string      `json:"oom_allocation_sites_error,omitempty"`
	// Settings are what the attempt ran with under --adapt (batch, accum,
	// workers, the allocator setting); Adaptations every change made up to
	// this attempt. Both absent without --adapt.
	Settings    *adapt.Settings `json:"settings,omitempty"`
	Adaptations []adapt.Step    `json:"adaptations,omitempty"`
	// Ranks are the ranks of a distributed job (each one's end, reason,
	// peaks, steps and last line), in rank order; empty for a job without
	// ranks. RootCause is the rank that failed first (or, in a stalled
	// job, stopped first); null when none was found.
	Ranks     []ranks.Rank     `json:"ranks"`
	RootCause *ranks.RootCause `json:"root_cause"`
	// Kernel is a notebook kernel's cells and newest autosave; absent for
	// any other job.
	Kernel *Kernel `json:"kernel,omitempty"`
	// Lost is what an attempt its scheduler ended lost (SchedulerEnd);
	// absent for any other end.
	Lost *Lost `json:"lost,omitempty"`
}

// MemStats summarises the memory of an attempt's process tree
// (docs/FAILURES.md, "Memory figures", defines each figure).
type MemStats struct {
	// PeakRSS is the job's peak host memory: the larger of PeakTree and
	// KernelMaxRSS; PeakSource says which ("kernel_max_rss", "tree_pss",
	// "tree_rss").
	PeakRSS    uint64 `json:"peak_rss_bytes"`
	PeakSource string `json:"peak_source,omitempty"`
	// PeakTree is the highest tree figure sampled: PSS summed over the
	// job's processes (TreeFigure "pss"), or RSS summed where smaps_rollup
	// could not be read ("rss"). PeakTreeRSS is the highest RSS sum, which
	// counts a page shared by forked processes once per process.
	PeakTree    uint64 `json:"peak_tree_bytes"`
	TreeFigure  string `json:"tree_figure,omitempty"`
	PeakTreeRSS uint64 `json:"peak_tree_rss_bytes"`
	// KernelMaxRSS is the largest max RSS (ru_maxrss) the kernel accounted
	// to any one process of the job, collected as each was reaped.
	KernelMaxRSS uint64 `json:"kernel_max_rss_bytes"`
	PeakProcs    int    `json:"peak_processes"`
	// PeakCgroup is the peak charge of the job's own cgroup (--memory-limit:
	// memory.peak, memory.max_usage_in_bytes on v1), page cache included;
	// 0 when the job has no cgroup of its own.
	PeakCgroup  uint64 `json:"peak_cgroup_bytes"`
	Limit       uint64 `json:"limit_bytes"`
	LimitSource string `json:"limit_source"`
	// LimitCgroup is the cgroup whose limit Limit is ("" for the host's
	// RAM); LimitPeak is the highest charge of that cgroup seen during the
	// attempt (page cache and any other process in it included): the
	// quantity the kernel holds to the limit.
	LimitCgroup    string `json:"limit_cgroup,omitempty"`
	LimitPeak      uint64 `json:"limit_peak_bytes,omitempty"`
	PeakGPU        uint64 `json:"peak_gpu_bytes"`
	Samples        int    `json:"samples"`
	CgroupOOMKills uint64 `json:"cgroup_oom_kills"`
}

// Resume says which checkpoint an attempt resumed from.
type Resume struct {
	Dir     string        `json:"dir"`
	From    string        `json:"from"` // "" when none was found
	Skipped []SkippedCkpt `json:"skipped"`
	// Problem says why the attempt started from scratch although the
	// directory holds checkpoints (none of them valid), or could not be
	// read; "" when it resumed, or found no checkpoint at all.
	Problem string `json:"problem,omitempty"`
	// Missing is set when Dir did not exist yet: nothing to resume, the
	// attempt started fresh (the first run of an auto-resume setup).
	Missing bool `json:"missing,omitempty"`
}

// SkippedCkpt is a newer checkpoint passed over because it failed the check.
type SkippedCkpt struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Probe is what the in-process probe saw over an attempt.
//
// Steps are per process: OptimizerSteps is the largest count any one process
// reported (data-parallel ranks each count their own steps; forked DataLoader
// workers count none), not a sum.
type Probe struct {
	Samples            int          `json:"samples"`
	TorchVersion       string       `json:"torch_version,omitempty"` // torch.__version__ in the job, once imported
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
}

// MarshalJSON writes empty lists as [] rather than null.
func (p Probe) MarshalJSON() ([]byte, error) {
	type plain Probe
	q := plain(p)
	if q.Checkpoints == nil {
		q.Checkpoints = []Checkpoint{}
	}
	if q.PIDs == nil {
		q.PIDs = []int{}
	}
	return json.Marshal(q)
}

// LastCheckpoint returns the time of the latest successful save; ok is
// false when there was none.
func (p *Probe) LastCheckpoint() (t time.Time, ok bool) {
	for _, c := range p.Checkpoints {
		if c.Error == "" && c.T.After(t) {
			t, ok = c.T, true
		}
	}
	return t, ok
}

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
	// Autosave marks a notebook's autosave (%vramguard autosave), with the
	// names of the objects saved.
	Autosave bool     `json:"autosave,omitempty"`
	Objects  []string `json:"objects,omitempty"`
	// Signal and WarnedAt: an autosave made on the scheduler's warning
	// (vramguard.autosave() in a script), the signal and when it arrived.
	Signal   string     `json:"signal,omitempty"`
	WarnedAt *time.Time `json:"warned_at,omitempty"`
	// Fallback marks a save on the warning made by the autosave's
	// fallback thread, between two steps, as no optimizer step came within
	// FallbackS seconds of the warning (0: the job was not stepping when
	// the warning came).
	Fallback  bool    `json:"fallback,omitempty"`
	FallbackS float64 `json:"fallback_s,omitempty"`
}

// WarningSaves adds to the evidence a line for each save the job made on
// its scheduler's warning. Call it once the probe's summary is in pm.Probe.
func WarningSaves(pm *Postmortem) {
	if pm.Probe == nil {
		return
	}
	for _, c := range pm.Probe.Checkpoints {
		if l := c.AfterWarning(pm.EndedAt); l != "" {
			pm.Evidence = append(pm.Evidence, c.Path+" was "+l)
		}
	}
}

// AfterWarning is the line that says when a save made on a warning was
// made: after the warning and, when end (the job's end) is known, before
// it; "" for any other save.
func (c Checkpoint) AfterWarning(end time.Time) string {
	if c.WarnedAt == nil || c.Error != "" {
		return ""
	}
	when := FormatSeconds(max(0, c.T.Sub(*c.WarnedAt).Seconds())) + " after the warning (" + c.Signal + ")"
	if !end.IsZero() && !end.Before(c.T) {
		when += " and " + FormatSeconds(end.Sub(c.T).Seconds()) + " before the job ended"
	}
	if c.Fallback && c.FallbackS == 0 {
		return fmt.Sprintf("saved by the fallback at step %d, %s: the job was not stepping when the warning came", c.Steps, when)
	}
	if c.Fallback {
		return fmt.Sprintf("saved by the fallback at step %d, %s: no optimizer step came within %s of the warning", c.Steps, when, FormatSeconds(c.FallbackS))
	}
	return fmt.Sprintf("saved at step %d, %s", c.Steps, when)
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

// AllocSite is one allocation site of a CUDA OOM snapshot.
type AllocSite struct {
	File     string `json:"file"`
	Line     int64  `json:"line"`
	Function string `json:"function"`
	Bytes    int64  `json:"bytes"`  // sum of the live blocks allocated here
	Blocks   int    `json:"blocks"` // how many
}
