package supervise

import (
	"encoding/json"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
)

// Postmortem is the full account of how an attempt ended: the verdict, the
// memory it used, where it resumed from. Its JSON form is what `explain
// --json` prints (docs/CLI.md documents it).
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
	// Probe is the in-process probe's summary, null when no probe reported.
	Probe json.RawMessage `json:"probe"`
	// Extra holds sections added by hooks (e.g. OOM allocation sites).
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// MemStats summarises the memory of an attempt's process tree.
type MemStats struct {
	PeakRSS        uint64 `json:"peak_rss_bytes"`
	PeakProcs      int    `json:"peak_processes"`
	PeakCgroup     uint64 `json:"peak_cgroup_bytes"`
	Limit          uint64 `json:"limit_bytes"`
	LimitSource    string `json:"limit_source"`
	PeakGPU        uint64 `json:"peak_gpu_bytes"`
	Samples        int    `json:"samples"`
	CgroupOOMKills uint64 `json:"cgroup_oom_kills"`
}

// Resume says which checkpoint an attempt resumed from.
type Resume struct {
	Dir     string        `json:"dir"`
	From    string        `json:"from"` // "" when none was found
	Skipped []SkippedCkpt `json:"skipped"`
}

// SkippedCkpt is a newer checkpoint passed over because it failed the check.
type SkippedCkpt struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}
