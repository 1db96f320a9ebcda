// Package diagnose explains how a job ended: it classifies an attempt's exit
// status, the tail of its output and the memory evidence into one reason
// code with the evidence behind it and advice on what to change. It is a pure
// function of its input: it reads no files and starts no processes.
//
// The output is read as a person reads it (Read, in read.go and tail.go):
// each line without the prefixes of launchers and loggers and attributed to
// the rank or process that printed it, every line that reports a failure
// given a role (cause, hint or consequence), and the first cause preferred to
// the consequences other ranks printed after it. Callers that judge ranks one
// by one (Reading.FirstByRank, Reading.Consequences) use the same reading.
package diagnose

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/vramguard/vramguard/internal/lazyre"

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
	Interrupted, TimeLimit, Preempted, Cancelled, NodeFailure, Restarted, Stalled, PeerFailed, Lost, StartFailed}

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
	// HangUp is set when the stop was the supervisor's own SIGHUP: the
	// terminal it ran in closed.
	HangUp    bool
	Restarted bool
	// KernelShutdown is set when a notebook kernel's client asked the
	// kernel to shut down before it ended (Jupyter's shutdown_request, as
	// the probe saw it), and KernelRestart when it asked for a restart (a
	// new process on the same connection file follows). The client's
	// SIGTERM after half of its shutdown_wait_time, and its SIGKILL at the
	// end, are then part of the request, not a user's stop.
	KernelShutdown, KernelRestart bool
	Stalled                       bool
	StallDesc                     string
	// Stacks holds Python stacks collected from a stalled job.
	Stacks []string
	// StartErr is set when the command could not be started at all.
	StartErr error
	// Stop is the signal that ended the job from outside and who sent it,
	// with what the scheduler says of it; nil when none did.
	Stop *Stop
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
	// Warnings say what makes an end that looks clean doubtful: a job
	// that exited 0 after catching a CUDA out-of-memory error
	// (postmortem's CaughtOOM). Absent when there is none.
	Warnings []string `json:"warnings,omitempty"`
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

// reasonText is the summary and advice of each reason an output line can
// point to.
var reasonText = map[string]struct {
	summary string
	advice  []string
}{
	CUDAForkError: {"CUDA was initialised in the parent before DataLoader workers (or other subprocesses) were forked",
		[]string{"Do not touch CUDA (tensors .cuda(), torch.cuda.* calls) before creating DataLoader workers, or",
			"use the spawn start method: DataLoader(..., multiprocessing_context=\"spawn\") or torch.multiprocessing.set_start_method(\"spawn\")."}},
	CUDAEnvError: {"the CUDA environment is broken: driver, device or PyTorch build do not match",
		[]string{"Run `vramguard doctor --python $(which python)` to compare torch.version.cuda with the driver's supported CUDA version.",
			"Install a PyTorch build for the installed driver (or update the driver); check CUDA_VISIBLE_DEVICES and that the container runs with the NVIDIA runtime.",
			"\"no kernel image\" or \"sm_NN is not compatible\": this PyTorch build has no kernels for the GPU's architecture; install a build that lists it (torch.cuda.get_arch_list())."}},
	CorruptCheckpoint: {"a checkpoint could not be read: it is truncated or corrupt (often a crash during torch.save)",
		[]string{"Resume from the newest valid checkpoint: `vramguard ckpt latest DIR`, or run with `--resume-from DIR`, which skips corrupt files.",
			"Write checkpoints atomically so a crash mid-save cannot corrupt them: `vramguard run --atomic-save`."}},
	ShmExhausted: {"the job ran out of shared memory (/dev/shm)",
		[]string{"Give the container more shared memory: `docker run --shm-size=8g` or `--ipc=host`; in Kubernetes mount an emptyDir with medium: Memory at /dev/shm.",
			"Or lower DataLoader num_workers / prefetch_factor, or use torch.multiprocessing.set_sharing_strategy(\"file_system\")."}},
	NCCLError: {"a collective (NCCL) operation failed or timed out",
		[]string{"Rerun with NCCL_DEBUG=INFO (and TORCH_NCCL_ASYNC_ERROR_HANDLING=1) to see which rank and link failed.",
			"A timeout usually means one rank stopped (crash, OOM, uneven data): check every rank's log; raise the timeout in init_process_group(timeout=...) only if a step is genuinely slow."}},
	CUDAError: {"a CUDA kernel failed (illegal memory access, misaligned address or device-side assert)",
		[]string{"Rerun with CUDA_LAUNCH_BLOCKING=1 so the traceback points at the kernel that failed.",
			"A device-side assert is usually an index out of range: check labels against the number of classes and embedding indices against the vocabulary size (run a step on CPU to get a readable error)."}},
	DataloaderDied: {"a DataLoader worker process died",
		[]string{"Run with num_workers=0 once to see the worker's real error.",
			"If the worker was killed by signal (Killed / Bus error), check host memory and /dev/shm: `vramguard doctor`."}},
	DiskFull: {"the disk filled up (no space left on device)",
		[]string{"Free space or write checkpoints elsewhere; prune old checkpoints with `vramguard ckpt prune DIR --keep-last N --apply`.",
			"Check `df -h` for the checkpoint and temporary directories (TMPDIR)."}},
}

var (
	reTraceback = lazyre.New(`^Traceback \(most recent calls? `)
	reExcName   = lazyre.New(`\w(?:Error|Exception|Interrupt|Exit)$`)
	reExcLine   = lazyre.New(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?::\s?(.*))?$`)
	reSegv      = lazyre.New(`(?i:segmentation fault)|SIGSEGV`)
	// Python's faulthandler, or a library's parachute handler that catches
	// SIGSEGV and aborts (pygame's "Fatal Python error: (pygame parachute)
	// Segmentation Fault", SDL 1.2's "Fatal signal: Segmentation Fault (SDL
	// Parachute Deployed)"): the process then dies of SIGABRT or exits
	reFatalSegv = lazyre.New(`Fatal Python error: (?:\([\w ]*parachute\) )?Segmentation [Ff]ault|Fatal signal: Segmentation Fault \(SDL Parachute Deployed\)`)
)

// Classify explains how an attempt ended. It reads the output tail as a
// person would (Read): prefixes stripped, lines attributed to the process
// that printed them, and the first failure that is a cause preferred to the
// consequences that followed it on other ranks.
func Classify(in Input) Verdict {
	v := Verdict{ExitCode: in.ExitStatus()}
	if name := SignalName(in.Signal); name != "" {
		v.Signal = &name
	}
	r := Read(in.Tail)
	exc, excLine := lastException(r.Lines, r)
	v.ExceptionType = exc
	schedReason, schedSummary, schedEvidence, sched := "", "", []string(nil), false
	if in.StartErr == nil && !in.Restarted && !in.Stalled {
		schedReason, schedSummary, schedEvidence, sched = schedulerEnd(r, in)
	}

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
	case in.KernelShutdown && endedAsAsked(in):
		if in.KernelRestart {
			v.Reason = Restarted
			v.Summary = "the kernel's client restarted it (a shutdown_request with restart): the next attempt is the new kernel process"
			v.Advice = append(v.Advice, "Nothing to fix: the restart was asked for.")
		} else {
			v.Reason = Success
			v.Summary = "the kernel's client shut it down (a shutdown_request)"
		}
		v.Evidence = append(v.Evidence, "the probe saw the kernel's client ask it to "+map[bool]string{true: "restart", false: "shut down"}[in.KernelRestart], exitEvidence(in))
		if in.ExitStatus() == 128+int(syscall.SIGABRT) {
			v.Evidence = append(v.Evidence, "the kernel aborted on its way out, after the request: Python aborts a process whose daemon threads still hold a lock or a C call as it shuts down; the request was ending the kernel anyway, so nothing of it is lost")
		}
		return v
	case sched:
		// the scheduler ended it: its own line (or the signal's sender)
		// says why, whatever the job printed on its way out
		v.Reason = schedReason
		v.Summary = schedSummary
		v.Evidence = append(v.Evidence, schedEvidence...)
		v.Evidence = append(v.Evidence, stopNotes(in)...)
		v.Evidence = append(v.Evidence, exitEvidence(in))
		v.Advice = append(v.Advice, schedulerAdvice[schedReason]...)
		return v
	case in.Interrupted && in.HangUp:
		v.Reason = Interrupted
		v.Summary = "the terminal closed (SIGHUP), and the job was stopped with it"
		v.Evidence = append(v.Evidence, "vramguard received SIGHUP: the terminal or SSH session it ran in went away", exitEvidence(in))
		v.Advice = append(v.Advice, "Run jobs that must outlive the terminal with --detach (vramguard run --detach -- ...; follow with vramguard logs -f RUN), or inside tmux or screen.",
			"Restart it with --resume-from DIR to continue from its newest checkpoint.")
		return v
	case in.Interrupted:
		v.Reason = Interrupted
		v.Summary = "the job was stopped by the user"
		v.Evidence = append(v.Evidence, stopNotes(in)...)
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

	dec, found := r.Decisive()
	if found && dec.Reason == CUDAOOM {
		o, _ := ParseOOM(oomText(r.Lines, dec))
		v.Reason = CUDAOOM
		v.OOM = &o
		v.Summary = "CUDA ran out of GPU memory"
		if o.Backend != "" && o.Backend != "cuda" {
			v.Summary = "the GPU ran out of memory (" + backendName(o.Backend) + ")"
		}
		v.Evidence = append(v.Evidence, truncate(strings.TrimSpace(dec.Text), 500))
		v.Evidence = append(v.Evidence, readEvidence(r, dec)...)
		v.Evidence = append(v.Evidence, oomEvidence(o)...)
		v.Advice = oomAdvice(o)
		if strings.Contains(dec.Text, "larger than 4GB") {
			v.Advice = append([]string{"Intel's runtime limits one allocation to 4 GB by default: split the tensor (a smaller batch or sequence), or on a PyTorch XPU build that supports it, set UR_L0_USE_RELAXED_ALLOCATION_LIMITS=1 to lift the limit."}, v.Advice...)
		}
		return v
	}
	if found && dec.Reason == NCCLError && dec.Role == Cause {
		// NCCL's "Last error:" says the CUDA call that failed under it ran
		// out of memory: the GPU was full when NCCL set up its buffers
		if l := ncclLastError(r.Lines, dec); reNCCLOOM.MatchString(l) {
			o := OOM{Backend: "cuda", Library: "NCCL"}
			v.Reason = CUDAOOM
			v.OOM = &o
			v.Summary = "CUDA ran out of GPU memory (in NCCL)"
			v.Evidence = append(v.Evidence, truncate(strings.TrimSpace(dec.Text), 500), "NCCL's last error: "+truncate(l, 500),
				"read: NCCL failed because a CUDA allocation under it ran out of memory: the GPU was full when NCCL set up its buffers")
			v.Evidence = append(v.Evidence, readEvidence(r, dec)...)
			v.Evidence = append(v.Evidence, exitEvidence(in))
			v.Advice = append([]string{"Leave NCCL room on the GPU: create the process group (and run the first collective) before the model and optimizer fill the GPU, or lower the memory the job takes; NCCL_BUFFSIZE lowers NCCL's own buffers."}, oomAdvice(o)...)
			return v
		}
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
		if found {
			v.Evidence = append(v.Evidence, truncate(strings.TrimSpace(dec.Text), 500))
		}
		v.Advice = append(v.Advice,
			"Raise the memory limit (--memory-limit, docker --memory, the pod's resources.limits.memory) or use less host memory:",
			"fewer DataLoader workers or a smaller prefetch_factor; load datasets lazily or memory-map them instead of holding them in every worker;",
			"with many workers, keep per-sample Python objects out of the Dataset (use numpy arrays) to avoid copy-on-read growth.")
		return v
	}

	if found && dec.Reason != "" && (dec.Role != Hint || !signalDecides(in, dec)) {
		t := reasonText[dec.Reason]
		v.Reason = dec.Reason
		v.Summary = t.summary
		v.Advice = append(v.Advice, t.advice...)
		switch dec.Reason {
		case Killed:
			v.Summary = "a worker of the job was killed with SIGKILL, and nothing shows it was the OOM killer"
			v.Advice = killedAdvice
		case Segfault:
			v.Summary = "a worker of the job crashed with a segmentation fault"
			v.Advice = segfaultAdvice
		case ShmExhausted:
			if dec.Role == Hint {
				v.Summary = "a worker of the job died of a bus error, the usual sign of a full /dev/shm"
			}
		}
		v.Evidence = append(v.Evidence, truncate(strings.TrimSpace(dec.Text), 500))
		if dec.Reason == NCCLError {
			if l := ncclLastError(r.Lines, dec); l != "" {
				v.Evidence = append(v.Evidence, "NCCL's last error: "+truncate(l, 500))
			}
			if done, ok := finishedBefore(r.Lines, dec); ok {
				v.Summary = "a collective (NCCL) hung at teardown, after the job's work was done"
				v.Evidence = append(v.Evidence, fmt.Sprintf("the job printed %q (line %d of the output tail) before it: the hang came at teardown, after the work", done.Text, done.Index+1))
				v.Advice = append([]string{"At the end of the script, wait for every rank (dist.barrier()), then call dist.destroy_process_group() before exiting, so that no collective is left pending when a rank exits; check that every rank runs the same number of collectives (an extra all_reduce or barrier on one rank hangs the others)."}, v.Advice...)
			}
			if dec.Kind == KindNCCLHang {
				v.Advice = append(v.Advice, "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC sets how long the watchdog may be stuck before the process is aborted; raise it only if the hang is a slow teardown of a large job.")
			}
		}
		v.Evidence = append(v.Evidence, readEvidence(r, dec)...)
		if excLine != "" && strings.TrimSpace(excLine) != strings.TrimSpace(dec.Text) {
			v.Evidence = append(v.Evidence, truncate(strings.TrimSpace(excLine), 500))
		}
		v.Evidence = append(v.Evidence, exitEvidence(in))
		return v
	}

	// A signal the job's output reports (a shell's or an IDE's line about
	// the command it ran) counts as the job's own when the job itself
	// ended with an error but not by a signal.
	sig, sigLine := in.Signal, ""
	if sig == 0 && in.ExitStatus() != 0 {
		sig, sigLine = reportedSignal(r.Lines, in.ExitStatus())
	}
	fatalSegv := ""
	if in.Signal == 0 || in.Signal == syscall.SIGABRT {
		fatalSegv = findLine(r.Lines, reFatalSegv)
	}
	// docker compose up exits 0 whatever its services did; its own line
	// says how each ended
	status, composeLine := in.ExitStatus(), ""
	if status == 0 {
		if line, code := composeExit(r.Lines); code != 0 {
			status, composeLine = code, line
		}
	}
	signalRead := func() {
		v.Evidence = append(v.Evidence, exitEvidence(in))
		if sigLine != "" {
			v.Evidence = append(v.Evidence, sigLine, "read: the job's output reports that the command it ran died of "+SignalName(sig)+" (a shell's or an IDE's report of its child's end)")
		}
	}
	switch {
	case sig == syscall.SIGSEGV || (in.ExitStatus() == 139 && reSegv.MatchString(strings.Join(in.Tail, "\n"))) || fatalSegv != "":
		v.Reason = Segfault
		v.Summary = "the process crashed with a segmentation fault"
		signalRead()
		switch {
		case fatalSegv != "":
			v.Evidence = append(v.Evidence, fatalSegv)
			if in.Signal == syscall.SIGABRT {
				v.Evidence = append(v.Evidence, "read: a fault handler caught the segmentation fault and aborted the process (hence SIGABRT): the crash is the segmentation fault")
			}
		case sigLine == "":
			if line := findLine(r.Lines, reSegv); line != "" {
				v.Evidence = append(v.Evidence, line)
			}
		}
		v.Advice = segfaultAdvice
		return v
	case sig == syscall.SIGBUS:
		v.Reason = ShmExhausted
		v.Summary = "the process died of a bus error, the usual sign of a full /dev/shm"
		signalRead()
		v.Advice = append(v.Advice, reasonText[ShmExhausted].advice...)
		return v
	case sig == syscall.SIGKILL:
		v.Reason = Killed
		v.Summary = "the job was killed with SIGKILL, and nothing shows it was the OOM killer"
		signalRead()
		v.Evidence = append(v.Evidence, "the memory cgroup's oom_kill counter did not rise and the kernel log names no process of the job")
		if e := memEvidence(in); e != "" {
			v.Evidence = append(v.Evidence, e)
		}
		v.Advice = killedAdvice
		return v
	case exc != "" && status != 0:
		v.Reason = PythonException
		v.Summary = "the job raised an uncaught Python exception: " + exc
		v.Evidence = append(v.Evidence, strings.TrimSpace(excLine))
		if found {
			v.Evidence = append(v.Evidence, readEvidence(r, dec)...)
		}
		v.Evidence = append(v.Evidence, exitEvidence(in))
		if composeLine != "" {
			v.Evidence = append(v.Evidence, composeLine, "read: docker compose exits 0 whatever its services do; its own line says the service failed")
		}
		v.Advice = append(v.Advice, "This is a bug or bad input in the job itself; retrying will fail the same way. Read the traceback with `vramguard logs RUN`.")
		return v
	case status == 0:
		v.Reason = Success
		v.Summary = "the job finished successfully"
		v.Evidence = append(v.Evidence, exitEvidence(in))
		return v
	}
	v.Reason = ExitError
	v.Summary = fmt.Sprintf("the job exited with status %d", status)
	v.Evidence = append(v.Evidence, exitEvidence(in))
	if composeLine != "" {
		v.Evidence = append(v.Evidence, composeLine, "read: docker compose exits 0 whatever its services do; its own line says the service failed")
	}
	if found {
		v.Evidence = append(v.Evidence, readEvidence(r, dec)...)
	}
	if len(in.Tail) > 0 {
		v.Evidence = append(v.Evidence, "last output: "+lastNonEmpty(in.Tail))
	}
	v.Advice = append(v.Advice, "Read the end of the log (`vramguard logs RUN`) for the job's own error message.")
	return v
}

var killedAdvice = []string{
	"Something outside the job killed it: a scheduler (SLURM, Kubernetes eviction or preemption), an operator, or a watchdog. Check the scheduler's events.",
	"If memory was close to its limit, treat it as a likely OOM kill whose record was lost, and leave more headroom."}

var segfaultAdvice = []string{
	"A segfault is a bug in native code (an extension, a driver, mismatched library versions): run with `python -X faulthandler` to get the Python stack at the crash.",
	"Check `vramguard doctor` for several CUDA runtimes on the library path, and try without custom extensions or with num_workers=0."}

// signalDecides reports whether the job's own death by signal says more than
// a hint read in its output: a job that itself died of SIGKILL or SIGSEGV is
// judged by the signal (with its memory evidence), not by a launcher's line.
func signalDecides(in Input, dec Failure) bool {
	return in.Signal == syscall.SIGKILL || in.Signal == syscall.SIGSEGV || in.Signal == syscall.SIGBUS
}

// readEvidence says what was read around the decisive failure: why its line
// means what the verdict says, which process printed it, and which later
// lines are its consequences rather than causes.
func readEvidence(r Reading, dec Failure) []string {
	var ev []string
	if dec.Why != "" {
		ev = append(ev, "read: "+dec.Why)
	}
	where := dec.describe()
	if where == "" {
		// "Signal 9 (SIGKILL) received by PID 10398" names no rank; the
		// launcher's "failed (exitcode: -9) local_rank: 0" does
		for _, f := range r.Failures {
			if f.Reason == dec.Reason && f.Role == dec.Role && f.Rank >= 0 {
				where = f.describe()
				break
			}
		}
	}
	cons := r.Consequences()
	switch dec.Role {
	case Consequence:
		s := "only consequences of a failure elsewhere were read (" + consequenceSummary(cons) + "): the process that failed first did not print its error in this output; read every rank's log"
		if where != "" {
			s = fmt.Sprintf("the first of them was printed by %s (line %d of the output tail); ", where, dec.Index+1) + s
		}
		ev = append(ev, s)
		return ev
	case Hint:
		if where != "" {
			ev = append(ev, fmt.Sprintf("read on %s (line %d of the output tail); no failure of its own was printed before it", where, dec.Index+1))
		}
	default:
		if where != "" {
			ev = append(ev, fmt.Sprintf("the first failure in the output, printed by %s (line %d of the output tail)", where, dec.Index+1))
		}
	}
	if len(cons) > 0 {
		verb := "are consequences, not causes"
		if len(cons) == 1 {
			verb = "is a consequence, not a cause"
		}
		ev = append(ev, fmt.Sprintf("%s %s: %s", units.Plural(len(cons), "other line"), verb, consequenceSummary(cons)))
	}
	return ev
}

// oomText is the OOM message of dec: its line and the lines the same
// process printed right after it (1.x messages wrap), up to a blank line.
func oomText(lines []Line, dec Failure) string {
	parts := []string{dec.Text}
	for j, n := dec.Line+1, 0; j < len(lines) && n < 6; j++ {
		if lines[j].Source != dec.Source {
			continue
		}
		n++
		if strings.TrimSpace(lines[j].Text) == "" {
			break
		}
		parts = append(parts, lines[j].Text)
	}
	return strings.Join(parts, "\n")
}

// endedAsAsked tells a kernel that ended as its client's shutdown request
// ends one (by itself, or by the SIGTERM or SIGKILL a client sends when it
// takes too long; SIGINT and SIGHUP as a supervisor forwards them; SIGABRT,
// which CPython raises when the interpreter's shutdown finds a daemon thread
// holding a stream's lock, and glibc when it unwinds such a thread from a C++
// call) from one that crashed on the way out (a segmentation fault, an
// exception, an exit status of its own).
func endedAsAsked(in Input) bool {
	if in.OOMKills > 0 || len(in.KernelOOM) > 0 {
		return false // the OOM killer's SIGKILL came first
	}
	switch in.ExitStatus() {
	case 0, 128 + int(syscall.SIGTERM), 128 + int(syscall.SIGKILL), 128 + int(syscall.SIGINT), 128 + int(syscall.SIGHUP), 128 + int(syscall.SIGABRT):
		return true
	}
	return false
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
	if o.Backend == "mps" {
		if o.AllocatedBytes != nil && o.OtherBytes != nil {
			s := fmt.Sprintf("the MPS allocator held %s, other Metal allocations %s", units.FormatBytes(*o.AllocatedBytes), units.FormatBytes(*o.OtherBytes))
			if o.AllowedBytes != nil {
				s += fmt.Sprintf(", against a limit of %s (the high watermark)", units.FormatBytes(*o.AllowedBytes))
			}
			ev = append(ev, s)
		}
		return ev
	}
	if o.ProcessBytes != nil {
		ev = append(ev, "this process had "+units.FormatBytes(*o.ProcessBytes)+" in use on the GPU, PyTorch's and others'")
	}
	if o.AllocatedBytes != nil {
		s := "PyTorch held " + units.FormatBytes(*o.AllocatedBytes) + " in tensors"
		if o.ReservedUnallocatedBytes != nil {
			s += " and " + units.FormatBytes(*o.ReservedUnallocatedBytes) + " reserved but unallocated"
		}
		if o.PrivatePoolBytes != nil {
			s += " (" + units.FormatBytes(*o.PrivatePoolBytes) + " of it in private pools, e.g. CUDA graphs)"
		}
		ev = append(ev, s)
	}
	if o.AllowedBytes != nil {
		ev = append(ev, "the process may use only "+units.FormatBytes(*o.AllowedBytes)+" of the GPU (set_per_process_memory_fraction)")
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
	switch o.Backend {
	case "mps":
		adv = append(adv, "Apple GPUs share the Mac's memory: close other GPU-heavy apps; PYTORCH_MPS_HIGH_WATERMARK_RATIO raises the cap (0.0 removes it, at the risk of the whole system swapping).")
	case "hip":
		if o.Fragmented {
			adv = append(adv, "Fragmentation: set PYTORCH_HIP_ALLOC_CONF=expandable_segments:True so cached blocks can be reused.")
		}
		adv = append(adv, "Other processes on the GPU: `rocm-smi --showpids` (vramguard samples NVIDIA GPUs only).")
	default:
		if o.Fragmented {
			adv = append(adv, "Fragmentation: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb:128 on PyTorch < 2.1) so cached blocks can be reused.")
		}
		if len(o.Processes) > 1 {
			adv = append(adv, "Other processes hold memory on this GPU: see `vramguard top` and stop them, or pick another GPU with CUDA_VISIBLE_DEVICES.")
		}
	}
	adv = append(adv,
		"Lower the batch size and keep the effective batch with gradient accumulation.",
		"Use mixed precision (torch.autocast with bfloat16) and activation checkpointing (torch.utils.checkpoint) to cut activation memory.",
		"If memory grows step after step, look for tensors kept alive across steps (e.g. `total_loss += loss` instead of `loss.item()`): `vramguard analyze RUN`.")
	return adv
}

// lastException finds the exception that ended the job as Python reported
// it: the last exception line of a traceback. An exception that only
// reports a failure elsewhere (torchrun's ChildFailedError, a spawned
// child's EOFError, a peer's closed connection) gives way to an earlier one
// that does not; with nothing else it is still returned.
func lastException(lines []Line, r Reading) (typ, line string) {
	consequence := map[int]bool{}
	for _, f := range r.Failures {
		if f.Role == Consequence {
			consequence[f.Line] = true
		}
	}
	var fallbackTyp, fallbackLine string
	for i := len(lines) - 1; i >= 0; i-- {
		t, ok := exceptionLine(lines, i)
		if !ok {
			continue
		}
		if consequence[i] || launcherException(t) {
			if fallbackTyp == "" {
				fallbackTyp, fallbackLine = t, lines[i].Text
			}
			continue
		}
		return t, lines[i].Text
	}
	return fallbackTyp, fallbackLine
}

func launcherException(typ string) bool {
	return strings.HasSuffix(typ, "ChildFailedError") || strings.HasSuffix(typ, "SignalException")
}

// exceptionLine reports whether lines[i] is the exception line of a Python
// traceback: an unindented "Type: message" right after the frames (an
// indented line) or the "Traceback (most recent call last):" header of
// the same process. Pasted tracebacks often lack their header.
func exceptionLine(lines []Line, i int) (typ string, ok bool) {
	l := strings.TrimRight(lines[i].Text, "\r ")
	if l == "" || l[0] == ' ' || l[0] == '\t' || strings.HasPrefix(l, "Traceback") ||
		strings.HasPrefix(l, "During handling") || strings.HasPrefix(l, "The above exception") {
		return "", false
	}
	m := reExcLine.FindStringSubmatch(l)
	if m == nil || m[1] == "Error" {
		return "", false
	}
	named := reExcName.MatchString(m[1])
	if named && strings.Contains(l, ":") && !continuesException(lines, i) {
		// "RuntimeError: CUDA error: ...": an exception however it was
		// pasted, with or without its frames
		return m[1], true
	}
	if !strings.Contains(l, ":") && !named {
		return "", false
	}
	if !named {
		// "weight: FilterDescriptor 0x7f..." under an indented dump is not
		// an exception: an exception of a type not named *Error follows a
		// traceback's frames
		return m[1], afterFrames(lines, i)
	}
	src := lines[i].Source
	for j := i - 1; j >= 0; j-- {
		if lines[j].Source != src {
			continue
		}
		p := lines[j].Text
		if strings.TrimSpace(p) == "" {
			continue // a blank line a paste put between the frames and the exception
		}
		if p[0] == ' ' || p[0] == '\t' || reTraceback.MatchString(strings.TrimSpace(p)) {
			return m[1], true
		}
		return "", false
	}
	return "", false
}

// continuesException reports whether lines[i] continues the message of an
// exception on the line before it: "ncclSystemError: System call ... failed"
// under "torch.distributed.DistBackendError: NCCL error in: ...".
func continuesException(lines []Line, i int) bool {
	for j := i - 1; j >= 0; j-- {
		if lines[j].Source != lines[i].Source {
			continue
		}
		p := strings.TrimSpace(lines[j].Text)
		if p == "" {
			return false
		}
		m := reExcLine.FindStringSubmatch(p)
		return m != nil && reExcName.MatchString(m[1]) && strings.Contains(p, ":")
	}
	return false
}

// ncclLastError returns the line under NCCL's "Last error:" that follows the
// decisive line (the system call that failed: "socketStartConnect: Connect
// to 192.168.19.14<52822> failed : No route to host"), or "".
func ncclLastError(lines []Line, dec Failure) string {
	for j, n := dec.Line+1, 0; j < len(lines) && n < 6; j++ {
		if lines[j].Source != dec.Source {
			continue
		}
		n++
		if strings.TrimSpace(lines[j].Text) != "Last error:" {
			continue
		}
		for k := j + 1; k < len(lines) && k < j+4; k++ {
			if lines[k].Source == dec.Source {
				return strings.TrimSpace(lines[k].Text)
			}
		}
	}
	return ""
}

func findLine(lines []Line, re *lazyre.RE) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if re.MatchString(lines[i].Text) {
			return strings.TrimSpace(truncate(lines[i].Text, 500))
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

// afterFrames reports whether lines[i] follows the frames of a traceback of
// its process: the indented lines right before it (blank lines aside) hold a
// `File "…", line N` frame, or the "Traceback" header is right before it.
func afterFrames(lines []Line, i int) bool {
	src := lines[i].Source
	indented := 0
	for j := i - 1; j >= 0 && indented < 200; j-- {
		if lines[j].Source != src {
			continue
		}
		p := lines[j].Text
		t := strings.TrimSpace(p)
		switch {
		case t == "":
			continue
		case reTraceback.MatchString(t):
			return true
		case p[0] == ' ' || p[0] == '\t':
			if strings.HasPrefix(t, "File \"") {
				return true
			}
			indented++
			continue
		}
		return false
	}
	return false
}

var (
	// a shell's or an IDE's report of how the command it ran ended: zsh
	// ("zsh: segmentation fault (core dumped)  python x.py", and the job
	// report "[1]  + 4821 bus error  python x.py", whose "[1] " may have been
	// read as a line number), bash ("bash: line 1:
	// 4821 Killed  python x.py"), an IDE ("Process finished with exit code
	// 137 (interrupted by signal 9: SIGKILL)")
	reIDESignal = lazyre.New(`Process finished with exit code \d+ \(interrupted by signal \d+: (SIG[A-Z]+)\)|fish: Job \d+, .* terminated by signal (SIG[A-Z]+)|Fatal Python error: (Bus error)`)
	// an IDE's status alone: 128+N, or Windows' access violation and
	// stack overflow (0xC0000005, 0xC00000FD), native crashes as SIGSEGV is
	reIDEStatus   = lazyre.New(`^Process finished with exit code (13[57]|139|-1073741819 \(0xC0000005\)|-1073741571 \(0xC00000FD\)|3221225477|3221225725)$`)
	reShellSignal = lazyre.New(`^(?:zsh: |(?:\[\d+\] *[+-]? *|[+-] +)\d+ |(?:/bin/)?(?:ba|da)?sh: line \d+: +\d+ )(segmentation fault|bus error|killed|Segmentation fault|Bus error|Killed)\b|^\d+ +(segmentation fault|bus error|killed)\b`)
	// a shell's bare line, trusted only where the exit status agrees
	reBareSignal = lazyre.New(`^(?:.*: line \d+: +\d+ )?(Segmentation fault|Bus error|Killed)(?: +\(core dumped\))?\b`)
	// NCCL's "Last error:" of a CUDA allocation that failed
	reNCCLOOM     = lazyre.New(`Cuda failure '?out of memory'?|Failed to CUDA calloc|cudaMalloc.* out of memory|cuMem\w+ .*CUDA_ERROR_OUT_OF_MEMORY`)
	reComposeExit = lazyre.New(`^([a-z0-9][a-z0-9_.-]*) exited with code (\d+)$`)
)

var shellSignals = map[string]syscall.Signal{"segmentation fault": syscall.SIGSEGV, "bus error": syscall.SIGBUS, "killed": syscall.SIGKILL,
	"SIGSEGV": syscall.SIGSEGV, "SIGBUS": syscall.SIGBUS, "SIGKILL": syscall.SIGKILL,
	"135": syscall.SIGBUS, "137": syscall.SIGKILL, "139": syscall.SIGSEGV}

// firstGroup returns the first non-empty submatch of m.
func firstGroup(m []string) string {
	for _, g := range m[1:] {
		if g != "" {
			return g
		}
	}
	return ""
}

// reportedSignal finds, from the end, a line that reports the command the
// job ran died of SIGSEGV, SIGBUS or SIGKILL; status is the job's exit
// status, which a shell's bare "Killed" must agree with (128+9).
func reportedSignal(lines []Line, status int) (syscall.Signal, string) {
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-40; i-- {
		t := strings.TrimSpace(lines[i].Text)
		if m := reIDESignal.FindStringSubmatch(t); m != nil {
			if s, ok := shellSignals[strings.ToLower(firstGroup(m))]; ok {
				return s, t
			}
			if s, ok := shellSignals[firstGroup(m)]; ok {
				return s, t
			}
		}
		if m := reIDEStatus.FindStringSubmatch(t); m != nil {
			if s, ok := shellSignals[m[1]]; ok {
				return s, t
			}
			return syscall.SIGSEGV, t // Windows' access violation or stack overflow
		}
		if m := reShellSignal.FindStringSubmatch(t); m != nil {
			return shellSignals[strings.ToLower(firstGroup(m))], t
		}
		if m := reBareSignal.FindStringSubmatch(t); m != nil {
			if s := shellSignals[strings.ToLower(m[1])]; status == 128+int(s) {
				return s, t
			}
		}
	}
	return 0, ""
}

// composeExit returns docker compose's last report of a service that exited
// with a non-zero code ("trainer-1 exited with code 1"), and the code.
func composeExit(lines []Line) (string, int) {
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-40; i-- {
		t := strings.TrimSpace(lines[i].Text)
		if m := reComposeExit.FindStringSubmatch(t); m != nil && m[2] != "0" {
			code, _ := strconv.Atoi(m[2])
			return t, code
		}
	}
	return "", 0
}

// reFinished is a job's own report that its work is done.
var reFinished = lazyre.New(`(?i)\b(?:training|train|fit|fine-?tuning|run|job|epochs?) (?:is |has )?(?:complete|completed|finished|done)\b|\bfinished training\b|\bsaving (?:the )?final\b`)

// finishedBefore returns the last line before the decisive failure in which
// the job said its work was done, if any.
func finishedBefore(lines []Line, dec Failure) (Line, bool) {
	for j := dec.Line - 1; j >= 0; j-- {
		if reFinished.MatchString(lines[j].Text) {
			return lines[j], true
		}
	}
	return Line{}, false
}
