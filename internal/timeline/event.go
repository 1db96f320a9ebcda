package timeline

import (
	"encoding/json"
	"time"
)

// Kind names an event. Every event vramguard raises, in a supervised run
// or in the agent, uses one of these.
type Kind = string

// Event kinds. Alert reports which of them are alerts (sent to the log and
// webhooks, counted in metrics).
const (
	// a job's life
	KindStart            Kind = "start"             // a job appeared (the agent) or an attempt started (run)
	KindExit             Kind = "exit"              // a job or attempt ended
	KindDied             Kind = "died"              // a job left after an OOM, a failed run, or without its probe's goodbye
	KindRestart          Kind = "restart"           // a new attempt started
	KindRestartRequested Kind = "restart_requested" // someone asked for a restart
	KindStop             Kind = "stop"              // someone stopped the job
	KindSignal           Kind = "signal"            // a signal that does not end the job was delivered to it (SIGUSR1: a scheduler's warning)
	KindResumeSkipped    Kind = "resume_skipped"    // a newer checkpoint failed verification and was not resumed from
	KindResumeNone       Kind = "resume_none"       // the resume directory holds checkpoint-looking files but none valid
	KindAdapt            Kind = "adapt"             // run --adapt changed the next attempt's settings

	// what the probe saw
	KindOOM        Kind = "oom"        // a CUDA out-of-memory error
	KindCheckpoint Kind = "checkpoint" // torch.save finished (a notebook's autosave among them; data: CheckpointData)
	KindCellStart  Kind = "cell_start" // a notebook kernel started running a cell (data: CellData)
	KindCell       Kind = "cell"       // the cell ended (data: CellData with its end and changes)

	// what the monitor concluded
	KindLeak        Kind = "leak"         // the leak detector found a leak
	KindOOMForecast Kind = "oom_forecast" // the OOM forecast fell below the warning
	KindUnsaved     Kind = "unsaved_work" // trained long without a checkpoint
	KindStalled     Kind = "stalled"      // no output, CPU or progress for the stall timeout
	KindNearLimit   Kind = "near_limit"   // host memory close to the limit it is enforced on
	KindIdle        Kind = "idle"         // held GPU memory unused past serve --notify-idle (data: user, uid, idle_s, gpu_bytes)
	KindReclaim     Kind = "reclaim"      // serve --reclaim-idle shut an idle kernel down (data as idle)
	KindVerdict     Kind = "verdict"      // a supervised run's monitor changed its verdict (data: VerdictData)

	KindNote Kind = "note" // posted through the API
)

// Alert reports whether events of kind k are alerts.
func Alert(k Kind) bool {
	switch k {
	case KindDied, KindLeak, KindOOMForecast, KindUnsaved, KindStalled, KindNearLimit, KindIdle, KindReclaim:
		return true
	}
	return false
}

// Event is something that happened to a job at a moment. Data holds the
// kind's figures as JSON (for leak and oom_forecast: a Finding).
type Event struct {
	ID      int64           `json:"id"`
	RunID   string          `json:"run_id,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	T       time.Time       `json:"t"`
	Kind    Kind            `json:"kind"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// VerdictData is a verdict event's data: the monitor's verdict (leak,
// stable, cache_growth, insufficient_data, ...), the series it rests on and
// how many samples it has seen. Supervised runs record one whenever the
// verdict changes, so views that read the store (top, serve) show the run's
// own verdict rather than judging it again.
type VerdictData struct {
	Verdict string `json:"verdict"`
	Series  string `json:"series,omitempty"`
	Samples int    `json:"samples"`
}

// CellData is a cell_start or cell event's data: one cell of a notebook
// kernel as the probe saw it at IPython's pre_run_cell and post_run_cell.
// On cell_start only the start and the host memory then are set. Deltas are
// end minus start in bytes; peak deltas the peak during the cell minus the
// value at its start (the probe's own readings of the kernel process:
// /proc/self figures and the allocator's counters).
type CellData struct {
	PID            int        `json:"pid"`
	ExecutionCount int        `json:"execution_count"`
	FirstLine      string     `json:"first_line"`
	Start          time.Time  `json:"start"`
	End            *time.Time `json:"end,omitempty"`
	Seconds        float64    `json:"seconds,omitempty"`
	// Error is the name of the exception the cell raised, "" for none.
	Error        string       `json:"error,omitempty"`
	RSSBytes     int64        `json:"rss_bytes"`
	RSSDelta     int64        `json:"rss_delta,omitempty"`
	RSSPeakDelta int64        `json:"rss_peak_delta,omitempty"`
	CUDA         []CellDevice `json:"cuda,omitempty"`
}

// CellDevice is what a cell changed on one CUDA device.
type CellDevice struct {
	Device             int   `json:"device"`
	AllocatedDelta     int64 `json:"allocated_delta"`
	AllocatedPeakDelta int64 `json:"allocated_peak_delta"`
	ReservedBytes      int64 `json:"reserved_bytes"`
	ReservedDelta      int64 `json:"reserved_delta"`
}

// CheckpointData is a checkpoint event's data: the file the probe saw
// saved, and for a notebook's autosave the objects in it.
type CheckpointData struct {
	PID      int      `json:"pid"`
	Path     string   `json:"path"`
	Bytes    int64    `json:"bytes"`
	Autosave bool     `json:"autosave,omitempty"`
	Objects  []string `json:"objects,omitempty"`
	// Script is the training script of vramguard.autosave() (a script's
	// autosave, not a notebook's); Signal names the warning it was made on
	Script string `json:"script,omitempty"`
	Signal string `json:"signal,omitempty"`
	// Fallback: saved by the fallback's thread, no step having come
	Fallback bool `json:"fallback,omitempty"`
}
