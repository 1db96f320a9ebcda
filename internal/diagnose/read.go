package diagnose

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// Role says how a failure line bears on the verdict.
type Role string

const (
	// Cause is a failure of its own: an OOM, a corrupt checkpoint, an NCCL
	// error, a full disk.
	Cause Role = "cause"
	// Hint decides only when no cause was read: a launcher's report that a
	// worker died of a signal, an NCCL warning, CUDA's generic "kernel
	// errors might be asynchronously reported" footer.
	Hint Role = "hint"
	// Consequence is collateral: the effect of a failure elsewhere (a
	// collective that timed out because a peer stopped, a peer's closed
	// connection, the launcher stopping the other ranks, a spawned child
	// that lost its parent). It decides only when nothing else was read.
	Consequence Role = "consequence"
)

// Kinds of consequence, for callers that tell a failed rank from the ranks
// its failure took down.
const (
	KindCollectiveTimeout = "collective_timeout" // an NCCL watchdog timeout, a gloo recv/send timeout
	KindPeerClosed        = "peer_closed"        // a peer closed or reset the connection
	KindLauncherStop      = "launcher_stop"      // the launcher stopping the other ranks (SIGTERM)
	KindLauncherReport    = "launcher_report"    // torchrun's ChildFailedError summary
	KindSpawnChild        = "spawn_child"        // a spawned child that found its parent gone
	// KindNCCLHang is a hint, not a consequence: NCCL's watchdog thread
	// hung and its heartbeat monitor aborted the process.
	KindNCCLHang = "nccl_hang"
)

// Failure is one line of output that says how the job, or one of its
// processes, failed.
type Failure struct {
	// Line is the index in Reading.Lines; Index the line's position in
	// the tail that was read.
	Line, Index int
	// Text, Source and Rank are the line's (see Line).
	Text   string
	Source string
	Rank   int
	// Reason is the reason code the line points to; "" for a line that
	// names no reason of its own (a peer's closed connection, the
	// launcher's summary).
	Reason string
	Role   Role
	// Kind says what was read: for consequences one of the Kind
	// constants; "gpu_oom" for an out-of-memory message.
	Kind string
	// Backend is the accelerator of a GPU OOM: cuda, hip, mps or xpu.
	Backend string
	// Why says what in the line or its traceback decided the reason,
	// where the line alone would be ambiguous; "" otherwise.
	Why string
}

// Reading is a job's output read the way a person reads it: its lines
// without prefixes, each attributed to the process that printed it, and
// every line that says how something failed.
type Reading struct {
	Lines    []Line
	Failures []Failure
}

// Read reads tail (a job's output, oldest line first): ReadLines, then every
// line that reports a failure, in order.
func Read(tail []string) Reading {
	lines := ReadLines(tail)
	r := Reading{Lines: lines}
	for i := range lines {
		if f, ok := failureAt(lines, i); ok {
			r.Failures = append(r.Failures, f)
		}
	}
	return r
}

// Decisive returns the failure a verdict rests on: the first cause; without
// one the first hint; without one the first consequence. ok is false when no
// line reports a failure.
func (r Reading) Decisive() (f Failure, ok bool) {
	for _, role := range []Role{Cause, Hint, Consequence} {
		for _, f := range r.Failures {
			if f.Role == role {
				return f, true
			}
		}
	}
	return Failure{}, false
}

// Consequences returns the failures that are consequences of another one.
func (r Reading) Consequences() []Failure {
	var out []Failure
	for _, f := range r.Failures {
		if f.Role == Consequence {
			out = append(out, f)
		}
	}
	return out
}

// FirstByRank returns, for every rank that printed a failure, the failure
// that rank would be judged by (its first cause, else hint, else
// consequence). Lines without a rank are left out.
func (r Reading) FirstByRank() map[int]Failure {
	byRank := map[int][]Failure{}
	for _, f := range r.Failures {
		if f.Rank >= 0 {
			byRank[f.Rank] = append(byRank[f.Rank], f)
		}
	}
	out := map[int]Failure{}
	for rank, fs := range byRank {
		if f, ok := (Reading{Failures: fs}).Decisive(); ok {
			out[rank] = f
		}
	}
	return out
}

// lineSig is one failure pattern of a single line.
type lineSig struct {
	reason  string
	role    Role
	kind    string
	backend string
	// needles: the line is matched against re only if it holds one of
	// them (a cheap filter: most lines hold none)
	needles []string
	re      *lazyre.RE
	// ctx, when set, must match the line's traceback (the lines its
	// process printed since "Traceback (most recent call last):") for the
	// pattern to hold: the call site decides what the line means
	ctx *lazyre.RE
	why string
}

// lineSigs are tried in order on every line; the first that holds decides
// the line. Consequences come before the causes whose words they contain
// (an NCCL watchdog timeout says "NCCL"; a launcher's report of SIGKILL
// says "failed").
var lineSigs = []lineSig{
	// the NCCL watchdog itself hung: its heartbeat monitor aborts the
	// process. A rank's own failure (often at teardown, a process that
	// exits with a collective pending or without destroy_process_group),
	// which a cause another rank printed still explains.
	{NCCLError, Hint, KindNCCLHang, "", []string{"Heartbeat monitor timed out", "watchdog got stuck", "watchdog hang"},
		lazyre.New(`Heartbeat monitor timed out|ProcessGroupNCCL's watchdog got stuck for|due to ProcessGroupNCCL watchdog hang`), nil,
		"ProcessGroupNCCL's heartbeat monitor found its watchdog thread stuck (a CUDA or NCCL call that never returned) and aborted the process"},
	// the watchdog's report of an NCCL error of this rank's own (a system,
	// internal or CUDA error; not a timeout, an abort or a remote error,
	// which another rank's failure causes): a cause
	{NCCLError, Cause, "", "", []string{"atchdog thread terminated with exception"},
		lazyre.New(`[Ww]atchdog thread terminated with exception: (?:NCCL error: (?:unhandled (?:system|cuda) error|internal error)|[^:]*(?:ncclSystemError|ncclInternalError|ncclUnhandledCudaError))`), nil,
		"the NCCL watchdog ended on an NCCL error of this rank (not a timeout waiting for another rank)"},
	// consequences of a failure elsewhere
	{NCCLError, Consequence, KindCollectiveTimeout, "", []string{"atchdog", "NCCL operations have failed", "taking the entire process down", "flight recorder"},
		lazyre.New(`Watchdog caught collective operation timeout|[Ww]atchdog thread terminated with exception|Some NCCL operations have failed or timed out|we are taking the entire process down|detected by watchdog|flight recorder dumps to finish`), nil, ""},
	{"", Consequence, KindCollectiveTimeout, "", []string{"Timed out waiting"},
		lazyre.New(`Timed out waiting \d+ms for (?:recv|send) operation`), nil, ""},
	// A rank whose NCCL communicator was aborted, or whose NCCL setup lost
	// its peer, is usually a consequence of another rank's failure; when no
	// rank printed a cause, it is still an NCCL failure, not the launcher's
	// ChildFailedError that follows it.
	{NCCLError, Consequence, KindPeerClosed, "", []string{"NCCL communicator was aborted", "by peer"},
		lazyre.New(`NCCL communicator was aborted|(?:DistBackendError|NCCL).*Connection (?:closed|reset) by peer`), nil, ""},
	{"", Consequence, KindPeerClosed, "", []string{"by peer", "BrokenPipeError"},
		lazyre.New(`Connection (?:closed|reset) by peer|BrokenPipeError`), nil, ""},
	// a launcher's report that a worker died of a signal: the signal is
	// the worker's death, but a failure the worker printed explains it
	{Killed, Hint, "launcher_signal", "", []string{"SIGKILL", "exitcode"},
		lazyre.New(`Signal 9 \(SIGKILL\) received by PID|exitcode\s*: -9\b|failed \(exitcode: -9\)|terminated with signal SIGKILL`), nil,
		"the launcher reports that a worker was killed with SIGKILL"},
	{Segfault, Hint, "launcher_signal", "", []string{"SIGSEGV", "exitcode"},
		lazyre.New(`Signal 11 \(SIGSEGV\) received by PID|exitcode\s*: -11\b|failed \(exitcode: -11\)|terminated with signal SIGSEGV`), nil,
		"the launcher reports that a worker died of SIGSEGV"},
	{ShmExhausted, Hint, "launcher_signal", "", []string{"SIGBUS", "exitcode"},
		lazyre.New(`Signal 7 \(SIGBUS\) received by PID|exitcode\s*: -7\b|failed \(exitcode: -7\)|terminated with signal SIGBUS`), nil,
		"the launcher reports that a worker died of SIGBUS, the usual sign of a full /dev/shm"},
	{"", Consequence, KindLauncherStop, "", []string{"closing signal", "via signal", "death signal", "got signal"},
		lazyre.New(`Sending process \d+ closing signal SIG\w+|Closing process \d+ via signal|Received \d+ death signal|SignalException: Process \d+ got signal`), nil, ""},
	{"", Consequence, KindLauncherReport, "", []string{"ChildFailedError", "failed (exitcode", "ProcessExitedException", "ProcessRaisedException"},
		lazyre.New(`ChildFailedError|failed \(exitcode: -?\d+\) local_rank|ProcessExitedException: process \d+ terminated|ProcessRaisedException`), nil, ""},
	{"", Consequence, KindSpawnChild, "", []string{"EOFError"},
		lazyre.New(`EOFError: Ran out of input`), lazyre.New(`multiprocessing[/\\](?:spawn|reduction)\.py`),
		"EOFError: Ran out of input in a spawned child (multiprocessing/spawn.py): the child lost its parent, whose own error is the cause"},

	// GPU out of memory, by backend
	{CUDAOOM, Cause, "gpu_oom", "mps", []string{"MPS backend out of memory"},
		lazyre.New(`MPS backend out of memory`), nil, ""},
	{CUDAOOM, Cause, "gpu_oom", "hip", []string{"HIP out of memory", "hipErrorOutOfMemory"},
		lazyre.New(`HIP out of memory|hipErrorOutOfMemory`), nil, ""},
	{CUDAOOM, Cause, "gpu_oom", "xpu", []string{"XPU out of memory"},
		lazyre.New(`XPU out of memory`), nil, ""},
	{CUDAOOM, Cause, "gpu_oom", "xpu", []string{"larger than 4GB"},
		lazyre.New(`Current platform can NOT allocate memory block with size larger than 4GB`), nil,
		"Intel's XPU runtime refused one allocation over 4 GB, its default limit for a single block, before the device was full: an OOM on another accelerator is still an OOM (reason cuda_oom, oom.backend xpu)"},
	{CUDAOOM, Cause, "gpu_oom", "xpu", []string{"OUT_OF_DEVICE_MEMORY", "OUT_OF_RESOURCES", "out of device memory"},
		lazyre.New(`(?:UR_RESULT|ZE_RESULT|PI)_ERROR_OUT_OF_(?:DEVICE_MEMORY|RESOURCES)|Allocation is out of device memory on current platform`), nil,
		"Intel's Level Zero runtime reports device memory exhausted as a runtime error (OUT_OF_DEVICE_MEMORY, OUT_OF_RESOURCES) rather than an OutOfMemoryError: an OOM on another accelerator is still an OOM (reason cuda_oom, oom.backend xpu)"},
	{CUDAOOM, Cause, "gpu_oom", "cuda", []string{"out of memory", "ALLOC_FAILED", "MemoryAllocation", "OutOfMemoryError", "Tried to allocate"},
		lazyre.New(`CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|CUDA [Ee]rror: out of memory|cudaErrorMemoryAllocation|cuda runtime error \(2\) : out of memory|THCudaCheck FAIL .*error=2 : out of memory|(?:torch|cuda)\.OutOfMemoryError|^Tried to allocate [\d.]+ ?[KMGT]?i?B \(GPU \d+;`), nil, ""},

	{CUDAForkError, Cause, "", "", []string{"forked subprocess"},
		lazyre.New(`Cannot re-initialize CUDA in forked subprocess`), nil, ""},
	{CUDAEnvError, Cause, "", "", []string{"NVIDIA driver", "CUDA-capable device", "CUDA driver version", "not compiled with CUDA", "CUDA unknown error", "forward compatibility", "display driver", "CUDA initialization", "kernel image", "NoKernelImage", "current PyTorch installation", "no longer supports this GPU"},
		lazyre.New(`NVIDIA driver on your system is too old|Found no NVIDIA driver|no CUDA-capable device is detected|CUDA driver version is insufficient|Torch not compiled with CUDA enabled|CUDA unknown error - this may be due to an incorrectly set up environment|forward compatibility was attempted on non supported HW|system has unsupported display driver / cuda driver combination|CUDA initialization: .*(?:driver|device)|no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice|CUDA capability sm_\d+ is not compatible with the current PyTorch installation|PyTorch no longer supports this GPU because it is too old|CUDA-capable device\(s\) is/are busy or unavailable`), nil, ""},

	// checkpoints
	{"", Hint, "weights_only", "", []string{"Weights only load failed"},
		lazyre.New(`Weights only load failed`), nil,
		"torch.load refused the file with weights_only=True (the default since PyTorch 2.6) because it holds Python objects: the file is intact, the load call needs weights_only=False for a trusted file"},
	{CorruptCheckpoint, Cause, "", "", []string{"EOFError"},
		lazyre.New(`EOFError: Ran out of input`), lazyre.New(`torch[/\\]serialization\.py|_legacy_load|torch\.load\(|pickle_module\.load|unpickler\.load|load_checkpoint|load_state_dict\(torch\.load`),
		"EOFError: Ran out of input inside torch.load: the checkpoint file is empty or was cut short"},
	{"", Hint, "eof", "", []string{"EOFError"},
		lazyre.New(`EOFError: Ran out of input`), nil,
		"EOFError: Ran out of input, but not inside torch.load: some pickle stream ended early; it is not taken for a corrupt checkpoint"},
	{CorruptCheckpoint, Cause, "", "", []string{"invalid load key"},
		lazyre.New(`invalid load key, '(.*?)'`), nil, ""},
	{CorruptCheckpoint, Cause, "", "", []string{"PytorchStreamReader", "central directory", "unexpected EOF", "UnpicklingError", "deserializing header", "magic number"},
		lazyre.New(`PytorchStreamReader failed|failed finding central directory|unexpected EOF, expected \d+ more bytes|_pickle\.UnpicklingError|Error while deserializing header|Invalid magic number; corrupt file`), nil, ""},

	// full disks and full /dev/shm: the path or the call site decides
	// A DataLoader worker's bus error is torch's own sign of a full
	// /dev/shm, whether or not the message goes on to say so (older
	// releases stop at "Bus error.") and however it is wrapped afterwards
	// ("exited unexpectedly").
	{ShmExhausted, Cause, "", "", []string{"shared memory", "No space left", "torch_", "bus error", "shm", "Bus error"},
		lazyre.New(`out of shared memory|No space left on device.*(?:/dev/shm|torch_)|unable to write to file </torch_|Unexpected bus error encountered in worker|bus error.*shared memory|shm_open|unable to allocate shared memory|DataLoader worker \(pid \d+\) is killed by signal: Bus error`), nil, ""},
	// MapAllocator could not grow (ftruncate) or fill a shared-memory
	// file: where tensors cross between processes, that file is in /dev/shm
	{ShmExhausted, Cause, "", "", []string{"unable to resize file", "unable to stretch file", "unable to mmap"},
		lazyre.New(`unable to (?:resize|stretch) file <[^>]*> to the right size|unable to mmap \d+ bytes from file </torch_`), nil,
		"torch could not size or map the shared-memory file a tensor is passed through between processes (MapAllocator's ftruncate failed): /dev/shm is full or too small"},
	{ShmExhausted, Cause, "", "", []string{"Errno 28", "No space left"},
		lazyre.New(`\[Errno 28\]|No space left on device`), lazyre.New(`multiprocessing[/\\]synchronize\.py|SemLock|multiprocessing[/\\]sharedctypes\.py|shared_memory\.py|/dev/shm`),
		"[Errno 28] raised while creating a multiprocessing semaphore or shared memory (multiprocessing/synchronize.py, SemLock): those live in /dev/shm, so /dev/shm is full, not the disk"},
	{DiskFull, Cause, "", "", []string{"PytorchStreamWriter", "unexpected pos"},
		lazyre.New(`PytorchStreamWriter failed writing|unexpected pos \d+ vs \d+`), nil,
		"torch.save could not write the checkpoint (PytorchStreamWriter): a full disk or quota is the usual cause"},
	{DiskFull, Cause, "", "", []string{"StorageFull", "code: 28"},
		lazyre.New(`StorageFull|IoError\(Os \{ code: 28`), nil,
		"safetensors could not write the file: the OS said StorageFull (errno 28)"},
	{DiskFull, Cause, "", "", []string{"No space left", "Errno 28", "ENOSPC", "quota", "Errno 122", "os error 28"},
		lazyre.New(`No space left on device|\[Errno 28\]|ENOSPC|Disk quota exceeded|\[Errno 122\]|os error 28`), nil, ""},

	{NCCLError, Cause, "", "", []string{"NCCL", "nccl", "DistBackendError"},
		lazyre.New(`NCCL error|NCCL Error \d+:|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclRemoteError|ncclInvalidUsage|ncclInvalidArgument|DistBackendError`), nil, ""},
	{NCCLError, Hint, "", "", []string{"NCCL WARN"},
		lazyre.New(`NCCL WARN`), nil, ""},
	{CUDAError, Cause, "", "", []string{"illegal", "assert", "CUDA error", "EXECUTION_FAILED", "misaligned", "ECC", "launch failure", "Assertion"},
		lazyre.New(`illegal memory access|illegal instruction|device-side assert triggered|CUDA error: (?:misaligned address|unspecified launch failure|invalid device|invalid argument)|CUBLAS_STATUS_EXECUTION_FAILED|CUDNN_STATUS_EXECUTION_FAILED|misaligned address|uncorrectable ECC error|unspecified launch failure|\.cu:\d+: .*Assertion .* failed`), nil, ""},
	{CUDAError, Cause, "", "", []string{"CUDNN_STATUS_"},
		lazyre.New(`CUDNN_STATUS_(?:INTERNAL_ERROR|NOT_INITIALIZED|MAPPING_ERROR|ARCH_MISMATCH|RUNTIME_\w+)`), nil,
		"cuDNN failed inside a call (an internal error, a handle it could not create): most often the GPU was nearly full when cuDNN set up its workspace, else a cuDNN build that does not match the driver or GPU"},
	{CUDAError, Hint, "", "", []string{"CUDA kernel errors", "CUDA error"},
		lazyre.New(`CUDA kernel errors might be asynchronously reported|CUDA error: `), nil, ""},
	{DataloaderDied, Cause, "", "", []string{"DataLoader worker"},
		lazyre.New(`DataLoader worker \(pid\(?s?\)? ?[\d, ]*\)? (?:exited unexpectedly|is killed by signal)|DataLoader worker \(pid \d+\) is killed`), nil, ""},
}

var reIPythonSource = lazyre.New(`^(?:-*> ?)?\d+ +`)

var reRankInText = lazyre.New(`\[(?:PG [^\]]*?)?Rank (\d+)\]|local_rank: (\d+)`)

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// sourceLine reports whether a line is a line of Python source shown in a
// traceback (`raise RuntimeError("...")`, `except OutOfMemoryError:`): it
// names an error without reporting one.
func sourceLine(t string) bool {
	t = strings.TrimLeft(t, " \t")
	// IPython shows source with an arrow and line numbers: "-> 1002     x = ..."
	if loc := reIPythonSource.FindStringIndex(t); loc != nil {
		t = t[loc[1]:]
	}
	for _, p := range []string{"raise ", "except ", "elif ", "if ", "#", "assert "} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// reCutSignal is a DataLoader worker's "is killed by signal: Bus error."
// cut where a console or logger wrapped it, before the signal's name ends.
var (
	reCutSignal    = lazyre.New(`DataLoader worker \(pid \d+\) is killed by signal:(?: Bus)?\s*$`)
	reBusErrorNext = lazyre.New(`^\s*(?:Bus )?error\b`)
)

// failureAt reads line i of lines.
func failureAt(lines []Line, i int) (Failure, bool) {
	t := lines[i].Text
	if len(t) < 6 {
		return Failure{}, false
	}
	if strings.HasSuffix(strings.TrimSpace(t), ":") || strings.HasSuffix(strings.TrimSpace(t), "Bus") {
		if reCutSignal.MatchString(t) {
			// the rest of the message is on the next line of the same process
			for j := i + 1; j < len(lines) && j <= i+3; j++ {
				if lines[j].Source != lines[i].Source {
					continue
				}
				if reBusErrorNext.MatchString(lines[j].Text) {
					return Failure{Line: i, Index: lines[i].Index, Text: strings.TrimSpace(t) + " " + strings.TrimSpace(lines[j].Text),
						Source: lines[i].Source, Rank: lines[i].Rank, Reason: ShmExhausted, Role: Cause,
						Why: "a DataLoader worker killed by a bus error (its message wrapped onto the next line): torch's own sign of a full /dev/shm"}, true
				}
				break
			}
		}
	}
	ns, always := signatureNeedles()
	mask := ns.scan(t) | always
	if mask == 0 || sourceLine(t) || strings.HasPrefix(t, "terminate called after throwing") {
		// C++'s "terminate called after throwing an instance of 'T'"
		// names a type; its what() on the next line says what failed
		return Failure{}, false
	}
	for k := range lineSigs {
		if mask&(1<<k) == 0 {
			continue
		}
		s := &lineSigs[k]
		m := s.re.FindStringSubmatch(t)
		if m == nil {
			continue
		}
		if s.ctx != nil && !s.ctx.MatchString(context(lines, i)) {
			continue
		}
		f := Failure{Line: i, Index: lines[i].Index, Text: t, Source: lines[i].Source, Rank: lines[i].Rank,
			Reason: s.reason, Role: s.role, Kind: s.kind, Backend: s.backend, Why: s.why}
		if f.Rank < 0 {
			// "[Rank 3] Watchdog caught ...", "failed (exitcode: -9) local_rank: 3"
			if rm := reRankInText.FindStringSubmatch(t); rm != nil {
				if rm[1] != "" {
					f.Rank, f.Source = atoi(rm[1]), "rank"+rm[1]
				} else {
					f.Rank, f.Source = atoi(rm[2]), "local_rank "+rm[2]
				}
			}
		}
		if s.reason == CorruptCheckpoint && len(m) > 1 {
			f.Why = loadKeyWhy(m[1])
		}
		if s.backend != "" && s.backend != "cuda" && s.why == "" {
			f.Why = "the " + backendName(s.backend) + " backend ran out of memory: an OOM on another accelerator is still an OOM (reason cuda_oom, oom.backend " + s.backend + ")"
		}
		return f, true
	}
	return Failure{}, false
}

// context is the traceback line i belongs to: the lines its process printed
// since the last "Traceback (most recent call last):" (at most 60 back), and
// line i itself (which alone holds a traceback flattened onto one line).
func context(lines []Line, i int) string {
	src := lines[i].Source
	parts := []string{lines[i].Text}
	for j, n := i-1, 0; j >= 0 && n < 60; j-- {
		if lines[j].Source != src {
			continue
		}
		n++
		parts = append(parts, lines[j].Text)
		if strings.Contains(lines[j].Text, "Traceback (most recent call last)") {
			break
		}
	}
	return strings.Join(parts, "\n")
}

// loadKeyWhy explains pickle's "invalid load key" by the byte it read.
func loadKeyWhy(key string) string {
	switch key {
	case "v":
		return "invalid load key 'v': the file starts with \"version\", a Git LFS pointer in place of the weights (run `git lfs pull`)"
	case "<":
		return "invalid load key '<': the file starts with '<', an HTML page (a failed download) in place of the checkpoint"
	case `\x00`:
		return `invalid load key '\x00': the file starts with zero bytes, as a file does whose writer died before its data reached the disk`
	}
	return "invalid load key '" + key + "': the file is not a checkpoint torch.load can read (truncated, overwritten or another format)"
}

func backendName(b string) string {
	switch b {
	case "mps":
		return "Apple MPS (Metal)"
	case "hip":
		return "AMD ROCm (HIP)"
	case "xpu":
		return "Intel XPU"
	}
	return "CUDA"
}

// describe names where a failure was printed, for evidence.
func (f Failure) describe() string {
	switch {
	case f.Rank >= 0 && f.Source == "torchrun root cause":
		return fmt.Sprintf("rank %d (torchrun's root-cause report)", f.Rank)
	case f.Rank >= 0 && strings.HasPrefix(f.Source, spawnSource):
		return fmt.Sprintf("process %d (mp.spawn's report; its rank, as mp.spawn is used)", f.Rank)
	case f.Rank >= 0 && strings.HasPrefix(f.Source, "task "):
		return fmt.Sprintf("Slurm task %d", f.Rank)
	case f.Rank >= 0 && strings.HasPrefix(f.Source, "local_rank "):
		return fmt.Sprintf("local rank %d", f.Rank)
	case f.Rank >= 0 && strings.HasPrefix(f.Source, "rank"):
		return fmt.Sprintf("rank %d", f.Rank)
	case f.Rank >= 0:
		return fmt.Sprintf("local rank %d (%s)", f.Rank, f.Source)
	case f.Source != "":
		return f.Source
	}
	return ""
}

// consequenceSummary says, in one line, which consequences were read and on
// which ranks: "NCCL watchdog timeouts (ranks 0, 2, 3); the launcher stopping
// the other workers".
func consequenceSummary(fs []Failure) string {
	type group struct {
		n     int
		ranks map[int]bool
	}
	groups := map[string]*group{}
	var order []string
	for _, f := range fs {
		g := groups[f.Kind]
		if g == nil {
			g = &group{ranks: map[int]bool{}}
			groups[f.Kind] = g
			order = append(order, f.Kind)
		}
		g.n++
		if f.Rank >= 0 {
			g.ranks[f.Rank] = true
		}
	}
	names := map[string]string{
		KindCollectiveTimeout: "collective timeouts (NCCL watchdog or gloo)",
		KindPeerClosed:        "connections closed by a peer",
		KindLauncherStop:      "the launcher stopping the other workers",
		KindLauncherReport:    "the launcher's failure report",
		KindSpawnChild:        "spawned children that lost their parent",
	}
	var parts []string
	for _, k := range order {
		g := groups[k]
		s := names[k]
		if s == "" {
			s = k
		}
		if len(g.ranks) > 0 {
			var rs []int
			for r := range g.ranks {
				rs = append(rs, r)
			}
			sort.Ints(rs)
			var b strings.Builder
			for i, r := range rs {
				if i > 0 {
					b.WriteString(", ")
				}
				if i == 8 {
					fmt.Fprintf(&b, "… %d more", len(rs)-8)
					break
				}
				fmt.Fprint(&b, r)
			}
			word := "ranks"
			if len(rs) == 1 {
				word = "rank"
			}
			s += fmt.Sprintf(" (%s %s)", word, b.String())
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
