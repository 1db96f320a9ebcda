package supervise

import (
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/ranks"
)

// How each process of a job ended, and when. The shim reaps only its own
// child and the orphans that reparent to it; a rank started by mp.spawn,
// torchrun or a launcher script is reaped by its launcher. So every process
// the sampler sees is watched through a pidfd: it turns readable the moment
// the process exits (its end, to the millisecond, whoever reaps it), and
// PIDFD_GET_INFO gives its exit status even after another parent reaped it
// (Linux 6.15; before that, the status is read from /proc while the
// process is a zombie, and may be missed). The shim's own reports add the
// kernel's max RSS of the processes it reaped.

// maxWatched bounds the pidfds an attempt holds at once (and the processes
// whose figures it keeps).
const maxWatched = 1024

// procExit is how one process of the job ended.
type procExit struct {
	t      time.Time
	status *ranks.Exit
	from   string // where status was read
	maxRSS uint64 // the kernel's max RSS, when the shim reaped it
}

// exitWatch watches the processes of one attempt.
type exitWatch struct {
	proc procfs.FS
	now  func() time.Time

	mu      sync.Mutex
	watched map[int]*os.File
	exits   map[int]*procExit
	order   []int // pids in the order they ended
	wg      sync.WaitGroup
	closed  bool
}

func newExitWatch(proc procfs.FS, now func() time.Time) *exitWatch {
	return &exitWatch{proc: proc, now: now, watched: map[int]*os.File{}, exits: map[int]*procExit{}}
}

// watch starts watching pid (once).
func (w *exitWatch) watch(pid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.watched[pid] != nil || w.exits[pid] != nil || len(w.watched) >= maxWatched {
		return
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return // gone already, or no pidfds (Linux < 5.3)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	w.watched[pid] = f
	w.wg.Add(1)
	go w.wait(pid, f)
}

func (w *exitWatch) wait(pid int, f *os.File) {
	defer w.wg.Done()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// The runtime's poller waits for the pidfd to turn readable; Close
	// ends the wait with an error.
	err = rc.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(p, 0)
		return n > 0
	})
	if err != nil {
		return
	}
	e := &procExit{t: w.now(), from: "pidfd"}
	// the status: from the zombie's /proc entry while it is one, else
	// from the pidfd once its parent reaped it (a launcher reaps at once)
	for i := 0; i < 25; i++ {
		if st, ok := w.proc.ZombieStatus(pid); ok {
			e.status, e.from = waitStatus(st), "its zombie's /proc/PID/stat, its end from a pidfd"
			break
		}
		var info unix.PidfdInfo
		info.Mask = unix.PIDFD_INFO_EXIT
		var ierr error
		_ = rc.Control(func(fd uintptr) { ierr = unix.IoctlPidfdInfo(int(fd), &info) })
		if ierr == nil && info.Mask&unix.PIDFD_INFO_EXIT != 0 {
			e.status = waitStatus(int(info.Exit_code))
			break
		}
		if ierr != nil {
			e.from = "a pidfd (its end; the kernel keeps no exit status for it: Linux 6.15's PIDFD_INFO_EXIT)"
		}
		if !w.proc.Exists(pid) {
			break // reaped, and this kernel keeps no exit status for pidfds
		}
		time.Sleep(20 * time.Millisecond) // between its exit and its zombie's status
	}
	w.mu.Lock()
	if w.exits[pid] == nil {
		w.exits[pid] = e
		w.order = append(w.order, pid)
	} else if w.exits[pid].status == nil {
		w.exits[pid].status, w.exits[pid].from = e.status, e.from
	}
	// the pidfd is done with: a long job's short-lived processes (a
	// DataLoader's workers, epoch after epoch) hold no descriptors
	if !w.closed {
		delete(w.watched, pid)
		f.Close()
	}
	w.mu.Unlock()
}

// reaped records what the shim reported of a process it reaped.
func (w *exitWatch) reaped(m statusMsg) {
	if m.PID <= 0 {
		return
	}
	st := &ranks.Exit{Code: m.ExitCode, Signal: syscall.Signal(m.Signal)}
	if m.Signal != 0 {
		st.Code = -1
	}
	t := w.now()
	if m.TimeNS > 0 {
		t = time.Unix(0, m.TimeNS)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.exits[m.PID]
	if e == nil {
		e = &procExit{t: t}
		w.exits[m.PID] = e
		w.order = append(w.order, m.PID)
	}
	if e.status == nil {
		e.status, e.from = st, "the shim, which reaped it"
	}
	e.maxRSS = m.MaxRSS
}

// finish waits (at most d) for the watched processes, all ended by now, to
// be recorded, and closes the pidfds.
func (w *exitWatch) finish(d time.Duration) {
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
	w.mu.Lock()
	w.closed = true
	for _, f := range w.watched {
		f.Close()
	}
	w.mu.Unlock()
	<-done
}

// get returns how pid ended (nil: not seen to end).
func (w *exitWatch) get(pid int) *procExit {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exits[pid]
}

// sigkilled lists the processes that died of SIGKILL, in the order they
// ended.
func (w *exitWatch) sigkilled() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, pid := range w.sortedOrder() {
		if e := w.exits[pid]; e.status != nil && e.status.Signal == syscall.SIGKILL {
			out = append(out, pid)
		}
	}
	return out
}

// sortedOrder is order by end time (the shim's reports can come after a
// pidfd's of a later end).
func (w *exitWatch) sortedOrder() []int {
	out := append([]int(nil), w.order...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && w.exits[out[j]].t.Before(w.exits[out[j-1]].t); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// waitStatus decodes a wait status.
func waitStatus(st int) *ranks.Exit {
	ws := syscall.WaitStatus(st)
	if ws.Signaled() {
		return &ranks.Exit{Code: -1, Signal: ws.Signal()}
	}
	return &ranks.Exit{Code: ws.ExitStatus()}
}
