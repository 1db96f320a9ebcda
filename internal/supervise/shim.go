package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/vramguard/vramguard/internal/runctl"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/procfs"
)

// ShimCommand is the hidden subcommand that runs the shim.
const ShimCommand = runctl.ShimCommand

// The shim sits between the supervisor and the job:
//
//	vramguard run (supervisor) ── vramguard __shim ── job (own process group)
//
// It is the job's parent and a child subreaper, so every descendant of the
// job, even one that started its own session, stays below it. It dies with
// the supervisor (PR_SET_PDEATHSIG delivers shimKillSignal, which the
// supervisor also sends to kill the job), and whenever it ends it kills
// every process below it first: no process of a job outlives vramguard,
// even a SIGKILLed vramguard.
//
// The shim delivers no signal: the supervisor signals the job itself. What
// the shim receives besides shimKillSignal was sent to the whole job (Slurm
// signals every process of a step), which the job got too, so the shim
// catches it only not to die of it.

// shimKillSignal tells the shim to kill the job and go. A real-time signal
// (SIGRTMIN+8), which no scheduler, runtime or terminal sends to a job: the
// signals they send are the job's.
const shimKillSignal = syscall.Signal(34 + 8)

// shimCatches are the signals a scheduler or a user may send to every
// process of a job: the shim must outlive them to report the job's end.
var shimCatches = []os.Signal{shimKillSignal, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGWINCH, syscall.SIGURG,
	syscall.SIGALRM, syscall.SIGPIPE, syscall.SIGXCPU}

// statusMsg is one line the shim writes on its status pipe (fd 3).
type statusMsg struct {
	Event    string `json:"event"` // started, start_error, reaped, exit
	PID      int    `json:"pid,omitempty"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
	// MaxRSS is the largest max RSS (ru_maxrss) the kernel accounted to
	// any process of the job the shim reaped: the job's main process (with
	// the children it reaped itself, DataLoader workers) and every orphan.
	MaxRSS uint64 `json:"max_rss_bytes,omitempty"`
	// TimeNS is when a reaped process was reaped (Unix nanoseconds); a
	// "reaped" line reports each process the shim reaped (the job's main
	// process and every orphan): its PID, status and own max RSS.
	TimeNS int64 `json:"t_ns,omitempty"`
}

// RunShim is the shim's main: args are [--parent PID] [--cgroup-procs
// FILE] -- CMD ARGS, where PID is the supervisor's. It returns the shim's
// own exit code.
func RunShim(args []string) int {
	var procsFile string
	want := 0 // the supervisor's PID; 0: unknown
	for len(args) > 0 && args[0] != "--" {
		if args[0] == "--cgroup-procs" && len(args) > 1 {
			procsFile = args[1]
			args = args[2:]
			continue
		}
		if args[0] == "--parent" && len(args) > 1 {
			want, _ = strconv.Atoi(args[1])
			args = args[2:]
			continue
		}
		fmt.Fprintf(os.Stderr, "vramguard __shim: unknown argument %q\n", args[0])
		return 2
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "vramguard __shim: no command")
		return 2
	}
	argv := args[1:]
	// The status pipe is the shim's alone: keep it out of the job.
	syscall.CloseOnExec(3)
	status := os.NewFile(3, "status")
	var statusMu sync.Mutex
	report := func(m statusMsg) {
		b, _ := json.Marshal(m)
		statusMu.Lock()
		status.Write(append(b, '\n'))
		statusMu.Unlock()
	}
	parent := os.Getppid()
	// Die with the supervisor: shimKillSignal means "kill everything and go".
	unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(shimKillSignal), 0, 0, 0)
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, shimCatches...)
	// The supervisor is already gone when the shim's parent changed, or is
	// not the supervisor (it died before the shim started). Its PID may be 1:
	// vramguard runs as the first process of a container.
	if os.Getppid() != parent || want != 0 && parent != want || want == 0 && parent == 1 {
		return 1
	}
	if procsFile != "" {
		if err := os.WriteFile(procsFile, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			report(statusMsg{Event: "start_error", Error: "join memory cgroup: " + err.Error()})
			return 1
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		report(statusMsg{Event: "start_error", Error: err.Error()})
		return 1
	}
	// Not os.StartProcess: see spawnJob for why the job is forked, not
	// vforked.
	job, err := spawnJob(path, argv)
	if err != nil {
		report(statusMsg{Event: "start_error", Error: err.Error()})
		return 1
	}
	report(statusMsg{Event: "started", PID: job})
	// The OOM killer should pick the job, never the shim that cleans up.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)

	type exit struct {
		pid int
		ws  syscall.WaitStatus
	}
	// Reap every child (orphans reparent to us); only the job's end
	// matters, and every child's max RSS.
	exits := make(chan exit, 1)
	var maxRSS atomic.Uint64
	go func() {
		for {
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			pid, err := syscall.Wait4(-1, &ws, 0, &ru)
			if err != nil {
				if errors.Is(err, syscall.EINTR) {
					continue
				}
				if errors.Is(err, syscall.ECHILD) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				return
			}
			raiseMax(&maxRSS, uint64(ru.Maxrss)*1024)
			report(reapedMsg(pid, ws, &ru))
			if pid == job {
				exits <- exit{pid, ws}
			}
		}
	}()

	var final *statusMsg
	for final == nil {
		select {
		case s := <-sigs:
			if s == shimKillSignal {
				killTree(os.Getpid(), job)
				return 1
			}
			// sent to the whole job, which has it too
		case e := <-exits:
			m := statusMsg{Event: "exit", PID: job, ExitCode: e.ws.ExitStatus()}
			if e.ws.Signaled() {
				m.Signal = int(e.ws.Signal())
				m.ExitCode = -1
			}
			final = &m
		}
	}
	// The job's main process is gone: end whatever it left behind.
	killTree(os.Getpid(), job)
	final.MaxRSS = childrenMaxRSS(&maxRSS, report)
	report(*final)
	return 0
}

// killTree ends every descendant of root: SIGTERM to the job's group and the
// tree, a short grace, then SIGKILL until nothing is left. Only children of
// root are reaped here; orphans reparent to root (a subreaper), so the tree
// shrinks to nothing.
func killTree(root, job int) {
	_ = syscall.Kill(-job, syscall.SIGKILL)
	deadline := time.Now().Add(3 * time.Second)
	for {
		if root == os.Getpid() && !hasChildren() {
			// Every descendant has an ancestor that is our child (orphans
			// reparent to us): none left, no need to read every process.
			return
		}
		all, err := procfs.FS{}.All()
		if err != nil {
			return
		}
		live := 0
		for _, p := range procfs.Tree(all, root)[1:] {
			if p.State != "Z" {
				live++
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
		if live == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hasChildren reports whether this process has a child, live or not yet
// reaped (a child of any of its threads), without reaping it.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

func raiseMax(m *atomic.Uint64, v uint64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// childrenMaxRSS reaps what killTree left as zombies and returns the largest
// max RSS of any child reaped: from wait4 and from RUSAGE_CHILDREN, which
// also covers what the reaper goroutine has not reported yet.
func childrenMaxRSS(m *atomic.Uint64, report func(statusMsg)) uint64 {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			break
		}
		raiseMax(m, uint64(ru.Maxrss)*1024)
		report(reapedMsg(pid, ws, &ru))
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		raiseMax(m, uint64(ru.Maxrss)*1024)
	}
	return m.Load()
}

// reapedMsg is the "reaped" line of one process.
func reapedMsg(pid int, ws syscall.WaitStatus, ru *syscall.Rusage) statusMsg {
	m := statusMsg{Event: "reaped", PID: pid, ExitCode: ws.ExitStatus(), MaxRSS: uint64(ru.Maxrss) * 1024, TimeNS: time.Now().UnixNano()}
	if ws.Signaled() {
		m.Signal, m.ExitCode = int(ws.Signal()), -1
	}
	return m
}
