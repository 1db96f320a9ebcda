// Package doctor checks a machine for the classic ways a GPU training job
// dies — driver too old for the installed torch, a 64 MB /dev/shm, checkpoints
// on a container's throwaway layer — before the job starts.
//
// Every check is a small function over an Env: a rooted filesystem that holds
// proc/, sys/, etc/ and the mount table, an environment-variable getter, a
// Python runner and a GPU source. Tests point Env at fixture trees; the CLI
// points it at the live machine. The package only reads, except for one
// temporary file it writes and removes in the checkpoint directory; it never
// initialises CUDA in its own process and prints nothing.
package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/cgroup"
)

// Status is the outcome of one check.
type Status string

// The four outcomes. Only Fail makes `vramguard doctor` exit 1.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	NA   Status = "n/a" // not applicable here (no GPU, no torch, no --dir)
)

// Result is one check's verdict with the evidence behind it and, unless the
// status is OK, what to do about it.
type Result struct {
	ID       string         `json:"id"`
	Group    string         `json:"group"`
	Title    string         `json:"title"`
	Status   Status         `json:"status"`
	Evidence string         `json:"evidence"`
	Fix      string         `json:"fix,omitempty"`
	Facts    map[string]any `json:"facts,omitempty"`
}

// Summary counts results by status.
type Summary struct {
	OK   int `json:"ok"`
	Warn int `json:"warn"`
	Fail int `json:"fail"`
	NA   int `json:"n/a"`
}

// Report is every check's result, in a fixed order.
type Report struct {
	Schema     string    `json:"schema"`
	Python     string    `json:"python"`
	Dir        string    `json:"dir,omitempty"`
	Summary    Summary   `json:"summary"`
	DurationMS int64     `json:"duration_ms"`
	Checks     []Result  `json:"checks"`
	Started    time.Time `json:"started"`
}

// SchemaVersion names the --json layout documented in docs/DOCTOR.md.
const SchemaVersion = "vramguard.doctor/v1"

// Failed reports whether any check failed.
func (r *Report) Failed() bool { return r.Summary.Fail > 0 }

// Findings returns the results that need attention (warn and fail).
func (r *Report) Findings() []Result {
	var out []Result
	for _, c := range r.Checks {
		if c.Status == Warn || c.Status == Fail {
			out = append(out, c)
		}
	}
	return out
}

// Get returns the result with the given id.
func (r *Report) Get(id string) (Result, bool) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c, true
		}
	}
	return Result{}, false
}

// FSInfo is what statfs(2) says about the filesystem holding a path.
type FSInfo struct {
	Type       string `json:"type"` // "ext4", "overlay", "tmpfs", ... ("" when unknown)
	TotalBytes uint64 `json:"total_bytes"`
	FreeBytes  uint64 `json:"free_bytes"` // available to unprivileged users
}

// Env is everything a check may look at. Paths given to checks are as the
// examined system sees them ("/proc/self/mountinfo"); Env.path joins them
// under Root.
type Env struct {
	// Root holds proc/, sys/, etc/, dev/ and the checkpoint directory; ""
	// means the live "/".
	Root string
	// Getenv reads the examined process environment.
	Getenv func(string) string
	// Statfs reports on the filesystem holding path (a path as the examined
	// system sees it, not joined with Root).
	Statfs func(path string) (FSInfo, error)
	// GPU is the NVML view; NoNVML when there is none.
	GPU GPU
	// Python runs the torch probe with the given interpreter.
	Python PythonRunner
	// TryWrite writes, renames and removes a temporary file in dir (a path
	// joined with Root); nil means TryWriteDir.
	TryWrite func(dir string) (WriteResult, error)
	// Cwd is the project directory searched for an environment lock.
	Cwd string
	// Now is the clock.
	Now func() time.Time
}

// Options are the user's choices.
type Options struct {
	// Python is the interpreter to probe ("python3" resolved on PATH by the
	// caller, or --python).
	Python string
	// Dir is the checkpoint directory; "" skips the storage checks.
	Dir string
	// Keep is how many checkpoints are retained.
	Keep int
	// PythonTimeout bounds the torch probe.
	PythonTimeout time.Duration
}

func (e *Env) path(p string) string {
	root := e.Root
	if root == "" {
		return p
	}
	return filepath.Join(root, p)
}

func (e *Env) readFile(p string) ([]byte, error) { return os.ReadFile(e.path(p)) }

func (e *Env) exists(p string) bool {
	_, err := os.Stat(e.path(p))
	return err == nil
}

func (e *Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// facts is what the checks share: gathered once, concurrently, then read by
// pure check functions.
type facts struct {
	env  *Env
	opts Options

	torch    *Torch
	torchErr error

	gpu    GPUSnapshot
	gpuErr error

	mounts    []Mount
	mountsErr error
	container Container
	cgroup    cgroup.Limits
}

// Run gathers the facts and runs every check. The torch probe, the slow
// part, runs concurrently with everything else.
func Run(ctx context.Context, env Env, opts Options) *Report {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.GPU == nil {
		env.GPU = NoNVML{Root: env.Root}
	}
	if opts.Keep <= 0 {
		opts.Keep = 3
	}
	if opts.PythonTimeout <= 0 {
		opts.PythonTimeout = 15 * time.Second
	}
	start := env.Now()
	f := &facts{env: &env, opts: opts}

	var wg sync.WaitGroup
	if env.Python != nil && opts.Python != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, opts.PythonTimeout)
			defer cancel()
			f.torch, f.torchErr = env.Python.Probe(pctx, opts.Python)
			if f.torchErr == nil && f.torch == nil {
				f.torchErr = fmt.Errorf("probe returned nothing")
			}
		}()
	} else {
		f.torchErr = errNoPython
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.gpu, f.gpuErr = env.GPU.Snapshot(ctx)
	}()
	f.mounts, f.mountsErr = readMountInfo(&env, "/proc/self/mountinfo")
	f.container = detectContainer(&env, f.mounts)
	// No /proc/self/cgroup (not Linux, a bare fixture): no limits to report.
	f.cgroup, _ = cgroup.Reader{Root: env.Root}.LimitsOf(0)
	wg.Wait()

	rep := &Report{Schema: SchemaVersion, Python: opts.Python, Dir: opts.Dir, Started: start}
	for _, c := range checks {
		r := c.fn(f)
		r.ID, r.Group, r.Title = c.id, c.group, c.title
		rep.Checks = append(rep.Checks, r)
		switch r.Status {
		case OK:
			rep.Summary.OK++
		case Warn:
			rep.Summary.Warn++
		case Fail:
			rep.Summary.Fail++
		default:
			rep.Summary.NA++
		}
	}
	rep.DurationMS = env.Now().Sub(start).Milliseconds()
	return rep
}

type check struct {
	id, group, title string
	fn               func(*facts) Result
}

// checks is every check in report order. IDs are stable: scripts match on
// them (docs/DOCTOR.md lists each with its states).
var checks = []check{
	{"gpu.nvml", "gpu", "NVML present", checkNVML},
	{"gpu.driver", "gpu", "Driver and its highest CUDA", checkDriver},
	{"gpu.persistence", "gpu", "Persistence mode", checkPersistence},
	{"gpu.tenants", "gpu", "Other processes on the GPUs", checkTenants},
	{"gpu.orphans", "gpu", "GPU memory held by gone processes", checkOrphans},
	{"pytorch.import", "pytorch", "torch importable", checkTorchImport},
	{"pytorch.cuda", "pytorch", "torch's CUDA against the driver", checkTorchCUDA},
	{"pytorch.cudnn", "pytorch", "cuDNN", checkCUDNN},
	{"pytorch.cudart", "pytorch", "CUDA runtime libraries", checkCudart},
	{"pytorch.alloc_conf", "pytorch", "Allocator settings", checkAllocConf},
	{"pytorch.fork", "pytorch", "CUDA initialised before fork", checkFork},
	{"container.detect", "container", "Container", checkContainer},
	{"container.shm", "container", "/dev/shm size", checkShm},
	{"container.memory", "container", "Memory limit", checkMemLimit},
	{"container.cpu", "container", "CPU limit", checkCPULimit},
	{"container.pidns", "container", "PID namespace", checkPIDNS},
	{"storage.ephemeral", "storage", "Checkpoint filesystem", checkEphemeral},
	{"storage.space", "storage", "Free space for checkpoints", checkSpace},
	{"storage.writable", "storage", "Writable, atomic rename", checkWritable},
	{"repro.lock", "repro", "Environment lock", checkLock},
	{"host.overcommit", "host", "Memory overcommit", checkOvercommit},
	{"host.swap", "host", "Swap", checkSwap},
	{"host.nofile", "host", "Open-file limit", checkNofile},
	{"host.memlock", "host", "Locked-memory limit", checkMemlock},
	{"host.numa", "host", "NUMA layout", checkNUMA},
}

// CheckIDs lists every check id in report order.
func CheckIDs() []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.id
	}
	return out
}

func okR(ev string) Result        { return Result{Status: OK, Evidence: ev} }
func naR(ev string) Result        { return Result{Status: NA, Evidence: ev} }
func warnR(ev, fix string) Result { return Result{Status: Warn, Evidence: ev, Fix: fix} }
func failR(ev, fix string) Result { return Result{Status: Fail, Evidence: ev, Fix: fix} }
func (r Result) with(k string, v any) Result {
	if r.Facts == nil {
		r.Facts = map[string]any{}
	}
	r.Facts[k] = v
	return r
}
