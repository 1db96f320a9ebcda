// Package diagnose explains how a job ended: it classifies an attempt's exit
// status, the tail of its output and the memory evidence into one reason
// code with the evidence behind it and advice on what to change. It is a pure
// function of its input: it reads no files and starts no processes.
package diagnose

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"

	"github.com/vramguard/vramguard/internal/units"
)

// Reason codes. docs/FAILURES.md documents each one.
const (
	Success           = "success"
	ExitError         = "exit_error"
	PythonException   = "python_exception"
	CUDAOOM           = "cuda_oom"
	HostOOMKilled     = "host_oom_killed"
	Killed            = "killed"
	ShmExhausted      = "shm_exhausted"
	DataloaderDied    = "dataloader_worker_died"
	NCCLError         = "nccl_error"
	CUDAError         = "cuda_error"
	CUDAForkError     = "cuda_fork_error"
	CUDAEnvError      = "cuda_env_error"
	CorruptCheckpoint = "corrupt_checkpoint"
	DiskFull          = "disk_full"
	Segfault          = "segfault"
	Interrupted       = "interrupted"
	Restarted         = "restarted"
	Stalled           = "stalled"
	Lost              = "lost"
	StartFailed       = "start_failed"
)

// Reasons lists every code in documentation order.
var Reasons = []string{Success, ExitError, PythonException, CUDAOOM, HostOOMKilled, Killed, ShmExhausted,
	DataloaderDied, NCCLError, CUDAError, CUDAForkError, CUDAEnvError, CorruptCheckpoint, DiskFull, Segfault,
	Interrupted, Restarted, Stalled, Lost, StartFailed}

// Deterministic reports whether retrying the same command is expected to fail
// the same way, so a restart policy should not retry it.
func Deterministic(reason string) bool {
	switch reason {
	case PythonException, CUDAEnvError, CUDAForkError, CorruptCheckpoint, StartFailed:
		return true
	}
	return false
}

// Input is everything known about one ended attempt.
type Input struct {
	// ExitCode is the exit status, or -1 when a signal ended the process.
	ExitCode int
	// Signal is the signal that ended the process, 0 if none.
	Signal syscall.Signal
	// Tail is the last lines of the attempt's output, stdout and stderr
	// interleaved as they arrived, oldest first.
	Tail []string
	// OOMKills is how far the cgroup's oom_kill counter rose during the
	// attempt; KernelOOM holds kernel log lines naming a process of the job.
	OOMKills  int
	KernelOOM []string
	// PeakRSS is the job's peak host memory and PeakWhat says what figure
	// it is ("PSS summed over its processes", ...); Limit is the memory
	// limit it ran under (cgroup, else host RAM); 0 unknown.
	PeakRSS, Limit uint64
	PeakWhat       string
	LimitSource    string // "cgroup", "--memory-limit", "host"
	// LimitPeak is the highest charge of the cgroup whose limit Limit is
	// (page cache included): what a cgroup limit is enforced on, so what
	// "% of its limit" compares; 0 when the limit is the host's RAM or the
	// charge was not read.
	LimitPeak uint64
	// Interrupted is set when the user (Ctrl-C, SIGTERM, vramguard stop)
	// ended the job; Restarted when a restart request (vramguard restart,
	// the agent's API) ended the attempt so that the next one starts;
	// Stalled when the stall timeout did.
	Interrupted bool
	Restarted   bool
	Stalled     bool
	StallDesc   string
	// Stacks holds Python stacks collected from a stalled job.
	Stacks []string
	// StartErr is set when the command could not be started at all.
	StartErr error
}

// Verdict is the classification of one attempt.
type Verdict struct {
	Reason        string   `json:"reason"`
	Summary       string   `json:"summary"`
	ExitCode      int      `json:"exit_code"`
	Signal        *string  `json:"signal"`
	ExceptionType string   `json:"exception_type,omitempty"`
	Evidence      []string `json:"evidence"`
	Advice        []string `json:"advice"`
	OOM           *OOM     `json:"oom,omitempty"`
}

// ExitStatus is the status a shell would report: the exit code, or 128+N
// for a process ended by signal N.
func (in Input) ExitStatus() int {
	if in.Signal != 0 {
		return 128 + int(in.Signal)
	}
	return in.ExitCode
}

// SignalName returns "SIGKILL" etc., or "" for 0.
func SignalName(s syscall.Signal) string {
	if s == 0 {
		return ""
	}
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(s))
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ",
}

// signature is one failure pattern found in output.
type signature struct {
	reason  string
	re      *regexp.Regexp
	summary string
	advice  []string
}

// signatures are tried in order against the output tail; the first that
// matches wins, so specific patterns come before general ones.
var signatures = []signature{
	{CUDAForkError, regexp.MustCompile(`Cannot re-initialize CUDA in forked subprocess`),
		"CUDA was initialised in the parent before DataLoader workers (or other subprocesses) were forked",
		[]string{"Do not touch CUDA (tensors .cuda(), torch.cuda.* calls) before creating DataLoader workers, or",
			"use the spawn start method: DataLoader(..., multiprocessing_context=\"spawn\") or torch.multiprocessing.set_start_method(\"spawn\")."}},
	{CUDAEnvError, regexp.MustCompile(`NVIDIA driver on your system is too old|Found no NVIDIA driver|no CUDA-capable device is detected|CUDA driver version is insufficient|Torch not compiled with CUDA enabled|CUDA unknown error - this may be due to an incorrectly set up environment|forward compatibility was attempted on non supported HW|system has unsupported display driver / cuda driver combination|CUDA initialization: .*(?:driver|device)`),
		"the CUDA environment is broken: driver, device or PyTorch build do not match",
		[]string{"Run `vramguard doctor --python $(which python)` to compare torch.version.cuda with the driver's supported CUDA version.",
			"Install a PyTorch build for the installed driver (or update the driver); check CUDA_VISIBLE_DEVICES and that the container runs with the NVIDIA runtime."}},
	{CorruptCheckpoint, regexp.MustCompile(`PytorchStreamReader failed|failed finding central directory|unexpected EOF, expected \d+ more bytes|invalid load key|_pickle\.UnpicklingError|safetensors_rust\.SafetensorError|Error while deserializing header`),
		"a checkpoint could not be read: it is truncated or corrupt (often a crash during torch.save)",
		[]string{"Resume from the newest valid checkpoint: `vramguard ckpt latest DIR`, or run with `--resume-from DIR`, which skips corrupt files.",
			"Write checkpoints atomically so a crash mid-save cannot corrupt them: `vramguard run --atomic-save`."}},
	{ShmExhausted, regexp.MustCompile(`out of shared memory|No space left on device.*(?:/dev/shm|torch_)|unable to write to file </torch_|Unexpected bus error encountered in worker|bus error.*shared memory|shm_open|unable to allocate shared memory`),
		"DataLoader workers ran out of shared memory (/dev/shm)",
		[]string{"Give the container more shared memory: `docker run --shm-size=8g` or `--ipc=host`; in Kubernetes mount an emptyDir with medium: Memory at /dev/shm.",
			"Or lower DataLoader num_workers / prefetch_factor, or use torch.multiprocessing.set_sharing_strategy(\"file_system\")."}},
	{NCCLError, regexp.MustCompile(`NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclRemoteError|ProcessGroupNCCL.*(?:timeout|Timeout|error)|Watchdog caught collective operation timeout|NCCL communicator was aborted|NCCL WARN`),
		"a collective (NCCL) operation failed or timed out",
		[]string{"Rerun with NCCL_DEBUG=INFO (and TORCH_NCCL_ASYNC_ERROR_HANDLING=1) to see which rank and link failed.",
			"A timeout usually means one rank stopped (crash, OOM, uneven data): check every rank's log; raise the timeout in init_process_group(timeout=...) only if a step is genuinely slow."}},
	{CUDAError, regexp.MustCompile(`illegal memory access|device-side assert triggered|CUDA error: (?:an illegal|misaligned address|unspecified launch failure|invalid device|invalid argument|CUBLAS_STATUS_EXECUTION_FAILED)|CUBLAS_STATUS_EXECUTION_FAILED|CUDNN_STATUS_EXECUTION_FAILED|CUDA kernel errors might be asynchronously reported`),
		"a CUDA kernel failed (illegal memory access or device-side assert)",
		[]string{"Rerun with CUDA_LAUNCH_BLOCKING=1 so the traceback points at the kernel that failed.",
			"A device-side assert is usually an index out of range: check labels against the number of classes and embedding indices against the vocabulary size (run a step on CPU to get a readable error)."}},
	{DataloaderDied, regexp.MustCompile(`DataLoader worker \(pid\(?s?\)? ?[\d, ]*\)? (?:exited unexpectedly|is killed by signal)|DataLoader worker \(pid \d+\) is killed`),
		"a DataLoader worker process died",
		[]string{"Run with num_workers=0 once to see the worker's real error.",
			"If the worker was killed by signal (Killed / Bus error), check host memory and /dev/shm: `vramguard doctor`."}},
	{DiskFull, regexp.MustCompile(`No space left on device|\[Errno 28\]|ENOSPC|Disk quota exceeded|\[Errno 122\]`),
		"the disk filled up (no space left on device)",
		[]string{"Free space or write checkpoints elsewhere; prune old checkpoints with `vramguard ckpt prune DIR --keep-last N --apply`.",
			"Check `df -h` for the checkpoint and temporary directories (TMPDIR)."}},
}

var (
	reTraceback = regexp.MustCompile(`^Traceback \(most recent call last\):`)
	reExcLine   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?::\s?(.*))?$`)
	reSegv      = regexp.MustCompile(`Segmentation fault|Fatal Python error: Segmentation fault|SIGSEGV`)
)

// Classify explains how an attempt ended.
func Classify(in Input) Verdict {
	v := Verdict{ExitCode: in.ExitStatus()}
	if name := SignalName(in.Signal); name != "" {
		v.Signal = &name
	}
	text := strings.Join(in.Tail, "\n")
	exc, excLine := lastException(in.Tail)
	v.ExceptionType = exc

	switch {
	case in.StartErr != nil:
		v.Reason = StartFailed
		v.Summary = "the command could not be started"
		v.Evidence = append(v.Evidence, in.StartErr.Error())
		v.Advice = append(v.Advice, "Check the command name and that it is executable and on PATH.")
		return v
	case in.Restarted:
		v.Reason = Restarted
		v.Summary = "the attempt was restarted by request (vramguard restart or the agent's API)"
		v.Evidence = append(v.Evidence, exitEvidence(in))
		return v
	case in.Interrupted:
		v.Reason = Interrupted
		v.Summary = "the job was stopped by the user"
		v.Evidence = append(v.Evidence, exitEvidence(in))
		v.Advice = append(v.Advice, "Nothing to fix. Restart it with --resume-from DIR to continue from its newest checkpoint.")
		return v
	case in.Stalled:
		v.Reason = Stalled
		v.Summary = "the job made no progress and was killed"
		if in.StallDesc != "" {
			v.Evidence = append(v.Evidence, in.StallDesc)
		}
		for _, s := range in.Stacks {
			v.Evidence = append(v.Evidence, firstLines(s, 40))
		}
		v.Advice = append(v.Advice,
			"Read the Python stacks above: a hang in a collective (all_reduce, barrier) means another rank died or never arrived; a hang in a DataLoader means a worker is stuck.",
			"Set a timeout on collectives (init_process_group(timeout=...)) and on data loading (DataLoader(timeout=...)).")
		return v
	}

	if o, ok := ParseOOM(text); ok {
		v.Reason = CUDAOOM
		v.OOM = &o
		v.Summary = "CUDA ran out of GPU memory"
		if line := findLine(in.Tail, reOOMMarker); line != "" {
			v.Evidence = append(v.Evidence, line)
		}
		v.Evidence = append(v.Evidence, oomEvidence(o)...)
		v.Advice = oomAdvice(o)
		return v
	}

	if in.OOMKills > 0 || len(in.KernelOOM) > 0 {
		v.Reason = HostOOMKilled
		v.Summary = "the kernel's OOM killer killed the job for using too much host memory"
		if in.OOMKills > 0 {
			v.Evidence = append(v.Evidence, fmt.Sprintf("the memory cgroup's oom_kill counter rose by %d during the run", in.OOMKills))
		}
		v.Evidence = append(v.Evidence, in.KernelOOM...)
		v.Evidence = append(v.Evidence, exitEvidence(in))
		if e := memEvidence(in); e != "" {
			v.Evidence = append(v.Evidence, e)
		}
		if line := findLine(in.Tail, signatures[6].re); line != "" {
			v.Evidence = append(v.Evidence, line)
		}
		v.Advice = append(v.Advice,
			"Raise the memory limit (--memory-limit, docker --memory, the pod's resources.limits.memory) or use less host memory:",
			"fewer DataLoader workers or a smaller prefetch_factor; load datasets lazily or memory-map them instead of holding them in every worker;",
			"with many workers, keep per-sample Python objects out of the Dataset (use numpy arrays) to avoid copy-on-read growth.")
		return v
	}

	for _, sig := range signatures {
		if line := findLine(in.Tail, sig.re); line != "" {
			v.Reason = sig.reason
			v.Summary = sig.summary
			v.Evidence = append(v.Evidence, line)
			if excLine != "" && excLine != line {
				v.Evidence = append(v.Evidence, excLine)
			}
			v.Evidence = append(v.Evidence, exitEvidence(in))
			v.Advice = append(v.Advice, sig.advice...)
			return v
		}
	}

	switch {
	case in.Signal == syscall.SIGSEGV || (in.ExitStatus() == 139 && reSegv.MatchString(text)) || (in.Signal == 0 && findLine(in.Tail, regexp.MustCompile(`Fatal Python error: Segmentation fault`)) != ""):
		v.Reason = Segfault
		v.Summary = "the process crashed with a segmentation fault"
		v.Evidence = append(v.Evidence, exitEvidence(in))
		if line := findLine(in.Tail, reSegv); line != "" {
			v.Evidence = append(v.Evidence, line)
		}
		v.Advice = append(v.Advice,
			"A segfault is a bug in native code (an extension, a driver, mismatched library versions): run with `python -X faulthandler` to get the Python stack at the crash.",
			"Check `vramguard doctor` for several CUDA runtimes on the library path, and try without custom extensions or with num_workers=0.")
		return v
	case in.Signal == syscall.SIGBUS:
		v.Reason = ShmExhausted
		v.Summary = "the process died of a bus error, the usual sign of a full /dev/shm"
		v.Evidence = append(v.Evidence, exitEvidence(in))
		v.Advice = append(v.Advice, signatures[3].advice...)
		return v
	case in.Signal == syscall.SIGKILL:
		v.Reason = Killed
		v.Summary = "the job was killed with SIGKILL, and nothing shows it was the OOM killer"
		v.Evidence = append(v.Evidence, exitEvidence(in), "the memory cgroup's oom_kill counter did not rise and the kernel log names no process of the job")
		if e := memEvidence(in); e != "" {
			v.Evidence = append(v.Evidence, e)
		}
		v.Advice = append(v.Advice,
			"Something outside the job killed it: a scheduler (SLURM, Kubernetes eviction or preemption), an operator, or a watchdog. Check the scheduler's events.",
			"If memory was close to its limit, treat it as a likely OOM kill whose record was lost, and leave more headroom.")
		return v
	case exc != "" && in.ExitStatus() != 0:
		v.Reason = PythonException
		v.Summary = "the job raised an uncaught Python exception: " + exc
		v.Evidence = append(v.Evidence, excLine, exitEvidence(in))
		v.Advice = append(v.Advice, "This is a bug or bad input in the job itself; retrying will fail the same way. Read the traceback with `vramguard logs RUN`.")
		return v
	case in.ExitStatus() == 0:
		v.Reason = Success
		v.Summary = "the job finished successfully"
		v.Evidence = append(v.Evidence, exitEvidence(in))
		return v
	}
	v.Reason = ExitError
	v.Summary = fmt.Sprintf("the job exited with status %d", in.ExitStatus())
	v.Evidence = append(v.Evidence, exitEvidence(in))
	if len(in.Tail) > 0 {
		v.Evidence = append(v.Evidence, "last output: "+lastNonEmpty(in.Tail))
	}
	v.Advice = append(v.Advice, "Read the end of the log (`vramguard logs RUN`) for the job's own error message.")
	return v
}

func exitEvidence(in Input) string {
	if in.Signal != 0 {
		return fmt.Sprintf("ended by signal %s (exit status %d)", SignalName(in.Signal), in.ExitStatus())
	}
	return fmt.Sprintf("exit status %d", in.ExitCode)
}

func memEvidence(in Input) string {
	if in.PeakRSS == 0 {
		return ""
	}
	s := "peak host memory of the job: " + units.FormatBytes(in.PeakRSS)
	if in.PeakWhat != "" {
		s += " (" + in.PeakWhat + ")"
	}
	switch {
	case in.Limit == 0:
		return s
	case in.LimitSource == "host":
		return s + fmt.Sprintf(", %.0f%% of the host's %s of RAM", pct(in.PeakRSS, in.Limit), units.FormatBytes(in.Limit))
	case in.LimitPeak > 0:
		// a cgroup limit holds the cgroup's charge, not the job's RSS
		return s + fmt.Sprintf("; its cgroup's charge (page cache included) peaked at %s, %.0f%% of its %s limit (%s)",
			units.FormatBytes(in.LimitPeak), pct(in.LimitPeak, in.Limit), units.FormatBytes(in.Limit), in.LimitSource)
	}
	// the charge the limit holds was not read: the job's own memory is a
	// part of it, so its share is a floor, said as such
	return s + fmt.Sprintf(", at least %.0f%% of its %s limit (%s): the cgroup's charge, which the limit holds, was not read",
		pct(in.PeakRSS, in.Limit), units.FormatBytes(in.Limit), in.LimitSource)
}

func pct(a, b uint64) float64 { return 100 * float64(a) / float64(b) }

func oomEvidence(o OOM) []string {
	var ev []string
	if o.Library != "" {
		ev = append(ev, o.Library+" could not allocate its workspace: the GPU was already full")
	}
	if o.TriedBytes != nil {
		s := "tried to allocate " + units.FormatBytes(*o.TriedBytes)
		if o.GPU != nil {
			s += fmt.Sprintf(" on GPU %d", *o.GPU)
		}
		if o.TotalBytes != nil && o.FreeBytes != nil {
			s += fmt.Sprintf(" (%s total, %s free)", units.FormatBytes(*o.TotalBytes), units.FormatBytes(*o.FreeBytes))
		}
		ev = append(ev, s)
	}
	if o.AllocatedBytes != nil {
		s := "PyTorch held " + units.FormatBytes(*o.AllocatedBytes) + " in tensors"
		if o.ReservedUnallocatedBytes != nil {
			s += " and " + units.FormatBytes(*o.ReservedUnallocatedBytes) + " reserved but unallocated"
		}
		ev = append(ev, s)
	}
	for _, p := range o.Processes {
		ev = append(ev, fmt.Sprintf("process %d had %s in use on the GPU", p.PID, units.FormatBytes(p.Bytes)))
	}
	if o.Fragmented {
		ev = append(ev, "fragmentation: the allocator's cache held more unallocated memory than the request, but not in one piece")
	}
	return ev
}

func oomAdvice(o OOM) []string {
	var adv []string
	if o.Fragmented {
		adv = append(adv, "Fragmentation: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb:128 on PyTorch < 2.1) so cached blocks can be reused.")
	}
	if len(o.Processes) > 1 {
		adv = append(adv, "Other processes hold memory on this GPU: see `vramguard top` and stop them, or pick another GPU with CUDA_VISIBLE_DEVICES.")
	}
	adv = append(adv,
		"Lower the batch size and keep the effective batch with gradient accumulation.",
		"Use mixed precision (torch.autocast with bfloat16) and activation checkpointing (torch.utils.checkpoint) to cut activation memory.",
		"If memory grows step after step, look for tensors kept alive across steps (e.g. `total_loss += loss` instead of `loss.item()`): `vramguard analyze RUN`.")
	return adv
}

// lastException finds the exception type of the last Python traceback.
func lastException(tail []string) (typ, line string) {
	start := -1
	for i := len(tail) - 1; i >= 0; i-- {
		if reTraceback.MatchString(strings.TrimSpace(tail[i])) {
			start = i
			break
		}
	}
	if start < 0 {
		return "", ""
	}
	// The exception line is the first unindented line after the frames.
	for _, l := range tail[start+1:] {
		if l == "" || l[0] == ' ' || l[0] == '\t' || strings.HasPrefix(l, "Traceback") {
			continue
		}
		if strings.HasPrefix(l, "During handling") || strings.HasPrefix(l, "The above exception") {
			continue
		}
		if m := reExcLine.FindStringSubmatch(strings.TrimRight(l, "\r")); m != nil {
			return m[1], l
		}
	}
	return "", ""
}

func findLine(tail []string, re *regexp.Regexp) string {
	for i := len(tail) - 1; i >= 0; i-- {
		if re.MatchString(tail[i]) {
			return strings.TrimSpace(truncate(tail[i], 500))
		}
	}
	return ""
}

func lastNonEmpty(tail []string) string {
	for i := len(tail) - 1; i >= 0; i-- {
		if s := strings.TrimSpace(tail[i]); s != "" {
			return truncate(s, 300)
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("… (%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}
