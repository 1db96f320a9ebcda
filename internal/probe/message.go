package probe

import (
	"math"
	"time"
)

// Message types on the wire (docs/PROBE.md).
const (
	TypeHello      = "hello"      // a process started (or was forked) under the probe
	TypeTorch      = "torch"      // the process finished importing torch
	TypeSample     = "sample"     // periodic: RSS, steps, per-device allocator stats
	TypeCkpt       = "ckpt"       // a torch.save finished (or failed)
	TypeOOM        = "oom"        // a CUDA out-of-memory error
	TypeError      = "error"      // the probe failed internally and went quiet
	TypeDist       = "dist"       // the process's rank, once torch.distributed's process group exists
	TypeException  = "exception"  // the uncaught exception that ends the process
	TypeBye        = "bye"        // the interpreter is exiting normally
	TypeCellStart  = "cell_start" // an IPython kernel starts running a cell (pre_run_cell)
	TypeCell       = "cell"       // the cell ended (post_run_cell), with what it changed
	TypeDisconnect = "disconnect" // synthesised by Listener: the connection closed
	TypeInvalid    = "invalid"    // synthesised by Listener: a line that is not a message
)

// TypeKernelShutdown is sent by a notebook kernel's probe when the kernel's
// client asks it to shut down, or to restart (Jupyter's shutdown_request).
const TypeKernelShutdown = "kernel_shutdown"

// Message is one JSON line from a probe. Fields that do not apply to a type
// are zero; pointer fields are nil when the probe did not send them.
type Message struct {
	V    int     `json:"v"`
	Type string  `json:"type"`
	PID  int     `json:"pid"`
	TS   float64 `json:"ts"` // Unix seconds, from the probed process's clock

	// hello
	PPID       int      `json:"ppid,omitempty"`
	Argv       []string `json:"argv,omitempty"`
	Executable string   `json:"executable,omitempty"`
	Python     string   `json:"python,omitempty"`
	Probe      string   `json:"probe,omitempty"`
	RunID      string   `json:"run_id,omitempty"`
	Attempt    int      `json:"attempt,omitempty"`
	Hz         float64  `json:"hz,omitempty"`
	Forked     bool     `json:"forked,omitempty"`

	// hello (when torch was already imported) and torch
	Torch    string `json:"torch,omitempty"`
	Version  string `json:"version,omitempty"`
	StepHook string `json:"step_hook,omitempty"`

	// sample (steps also on ckpt)
	Seq            int64         `json:"seq,omitempty"`
	RSSBytes       int64         `json:"rss_bytes,omitempty"`
	OptimizerSteps int64         `json:"optimizer_steps,omitempty"`
	UserSteps      int64         `json:"user_steps,omitempty"`
	CUDA           []DeviceStats `json:"cuda,omitempty"` // also on oom
	Dropped        int64         `json:"dropped,omitempty"`

	// ckpt (seconds also on cell)
	Path    string  `json:"path,omitempty"`
	Bytes   *int64  `json:"bytes,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	Atomic  bool    `json:"atomic,omitempty"`
	OK      *bool   `json:"ok,omitempty"`
	// ckpt of the notebook's autosave (%vramguard autosave): the names of
	// the objects saved
	Autosave bool     `json:"autosave,omitempty"`
	Objects  []string `json:"objects,omitempty"`
	// ckpt of vramguard.autosave() made on a warning signal: the signal's
	// name and when it arrived (unix seconds)
	Signal   string  `json:"signal,omitempty"`
	WarnedAt float64 `json:"warned_at,omitempty"`
	// Fallback marks such a save made by the fallback's thread: no
	// optimizer step came within FallbackS seconds of the warning
	Fallback  bool    `json:"fallback,omitempty"`
	FallbackS float64 `json:"fallback_s,omitempty"`
	// ckpt of vramguard.autosave() in a script: the script's path
	Script string `json:"script,omitempty"`

	// cell_start and cell (rss_bytes too; error names the exception a
	// cell raised; cuda holds the devices' deltas)
	ExecutionCount int    `json:"execution_count,omitempty"`
	FirstLine      string `json:"first_line,omitempty"`
	RSSDelta       int64  `json:"rss_delta,omitempty"`
	RSSPeakDelta   int64  `json:"rss_peak_delta,omitempty"`

	// kernel_shutdown: whether the client restarts the kernel after it
	Restart bool `json:"restart,omitempty"`

	// oom
	Source        string `json:"source,omitempty"` // "observer" or "excepthook"
	N             int    `json:"n,omitempty"`      // this process's OOM count
	Device        *int   `json:"device,omitempty"`
	AllocBytes    *int64 `json:"alloc_bytes,omitempty"`
	LimitBytes    *int64 `json:"limit_bytes,omitempty"`
	FreeBytes     *int64 `json:"free_bytes,omitempty"`
	Text          string `json:"message,omitempty"`
	SummaryPath   string `json:"summary_path,omitempty"`
	SnapshotPath  string `json:"snapshot_path,omitempty"`
	SummaryError  string `json:"summary_error,omitempty"`
	SnapshotError string `json:"snapshot_error,omitempty"`

	// dist
	Rank      *int   `json:"rank,omitempty"`
	WorldSize *int   `json:"world_size,omitempty"`
	LocalRank *int   `json:"local_rank,omitempty"`
	Backend   string `json:"backend,omitempty"`

	// exception (its text is Text)
	ExcType string `json:"exc_type,omitempty"`

	// error (also ckpt when ok is false)
	Where string `json:"where,omitempty"`
	Error string `json:"error,omitempty"`

	// Set by Listener, not sent by the probe.
	PeerPID int    `json:"-"` // from SO_PEERCRED when the connection was accepted
	PeerUID int    `json:"-"` // likewise; -1 when it could not be read
	Line    string `json:"-"` // the raw line, for TypeInvalid
}

// Time returns TS as a time.Time.
func (m Message) Time() time.Time {
	sec, frac := math.Modf(m.TS)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// DeviceStats is one CUDA device's allocator state in one sample.
// RequestedBytes is nil on torch versions that do not track it (< 2.1);
// FreeBytes/TotalBytes are nil when mem_get_info failed.
type DeviceStats struct {
	Device                 int    `json:"device"`
	AllocatedBytes         int64  `json:"allocated_bytes"`
	AllocatedPeakBytes     int64  `json:"allocated_peak_bytes"`
	ReservedBytes          int64  `json:"reserved_bytes"`
	ReservedPeakBytes      int64  `json:"reserved_peak_bytes"`
	ActiveBytes            int64  `json:"active_bytes"`
	ActivePeakBytes        int64  `json:"active_peak_bytes"`
	InactiveSplitBytes     int64  `json:"inactive_split_bytes"`
	InactiveSplitPeakBytes int64  `json:"inactive_split_peak_bytes"`
	RequestedBytes         *int64 `json:"requested_bytes,omitempty"`
	RequestedPeakBytes     *int64 `json:"requested_peak_bytes,omitempty"`
	Segments               int64  `json:"segments"`
	NumAllocRetries        int64  `json:"num_alloc_retries"`
	NumOOMs                int64  `json:"num_ooms"`
	FreeBytes              *int64 `json:"free_bytes,omitempty"`
	TotalBytes             *int64 `json:"total_bytes,omitempty"`

	// On a cell message only: what the cell changed on the device (end
	// minus start; the peak during the cell minus the value at its start).
	// ReservedBytes is then the reserved figure at the cell's end.
	AllocatedDelta     int64 `json:"allocated_delta,omitempty"`
	AllocatedPeakDelta int64 `json:"allocated_peak_delta,omitempty"`
	ReservedDelta      int64 `json:"reserved_delta,omitempty"`
}
