// Starting an attempt: the shim, the job's output pipes and their copiers, until the
// shim reports the job's PID.

package supervise

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/joblog"
	"github.com/vramguard/vramguard/internal/sampler"
)

// start launches the shim and waits for it to report the job's PID.
func (a *running) start(argv, env []string) error {
	o := a.s.o
	outR, outW, err := blockingPipe("stdout")
	if err != nil {
		return err
	}
	errR, errW, err := blockingPipe("stderr")
	if err != nil {
		return err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		return err
	}
	// A bigger pipe lets a burst of output wait in the kernel instead of
	// blocking the job on every 64 KiB; failure just keeps the default.
	for _, p := range []*os.File{outR, errR} {
		if rc, err := p.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
		}
	}
	args := []string{ShimCommand, "--parent", strconv.Itoa(os.Getpid())}
	if a.group != nil && a.group.ProcsFile() != "" {
		args = append(args, "--cgroup-procs", a.group.ProcsFile())
	}
	args = append(append(args, "--"), argv...)
	path := o.Self
	if a.group != nil && len(a.group.Wrap) > 0 {
		args = append(append(append([]string(nil), a.group.Wrap[1:]...), o.Self), args...)
		path = a.group.Wrap[0]
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = o.Dir
	cmd.Stdout, cmd.Stderr = outW, errW
	if o.Stdin != nil {
		cmd.Stdin = o.Stdin
	}
	cmd.ExtraFiles = []*os.File{stW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: shimKillSignal}
	a.startedUptime = uptime()

	// PR_SET_PDEATHSIG fires when the thread that forked exits, so the
	// shim is started and waited for on one locked OS thread.
	started := make(chan error, 1)
	a.shimDone = make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		a.shimDone <- cmd.Wait()
	}()
	err = <-started
	outW.Close()
	errW.Close()
	stW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		stR.Close()
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	a.shim = cmd
	a.shimPID = cmd.Process.Pid
	a.exits = newExitWatch(o.Proc, o.Now)
	a.lastOutput = o.Now()
	a.copies.Add(2)
	activity := func(int) {
		a.mu.Lock()
		a.lastOutput = o.Now()
		a.mu.Unlock()
	}
	go func() { defer a.copies.Done(); joblog.Copy(a.lw, 'o', outR, o.Stdout, activity); outR.Close() }()
	go func() { defer a.copies.Done(); joblog.Copy(a.lw, 'e', errR, o.Stderr, activity); errR.Close() }()

	a.statusR = stR
	a.status = bufio.NewReader(stR)
	line, err := a.status.ReadBytes('\n')
	var m statusMsg
	if err != nil || json.Unmarshal(line, &m) != nil {
		<-a.shimDone
		a.copies.Wait()
		return fmt.Errorf("start %s: the job did not start", argv[0])
	}
	if m.Event == "start_error" {
		<-a.shimDone
		a.copies.Wait()
		return fmt.Errorf("start %s: %s", argv[0], m.Error)
	}
	a.jobPID = m.PID
	a.seen = map[int]bool{m.PID: true}
	if a.group != nil && a.group.Dir != "" {
		a.cgDir, a.cgVersion = a.group.Dir, a.group.Version
	} else if dir, v, err := o.Cgroup.MemoryDir(a.jobPID); err == nil {
		a.cgDir, a.cgVersion = dir, v
	}
	if a.cgDir != "" {
		if m, err := cgroup.ReadMemory(a.cgDir, a.cgVersion); err == nil {
			a.oomStart = m.OOMKills
		}
	}
	spec := sampler.JobSpec{Root: a.shimPID, Main: a.jobPID, Proc: o.Proc, Cgroups: o.Cgroup, RankOf: a.probeRank}
	if a.group != nil && a.group.Dir != "" {
		spec.Cgroup, spec.CgroupVersion = a.group.Dir, a.group.Version
	}
	a.job = o.Sampler.WatchJob(spec)
	return nil
}

// blockingPipe is os.Pipe with a read end in blocking mode: the copier's
// goroutine then sleeps in read(2) until output comes, as tee does, rather
// than going through Go's poller (EAGAIN, epoll_wait, a wake-up, read again)
// for every chunk a job writes.
func blockingPipe(name string) (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), name), os.NewFile(uintptr(p[1]), name), nil
}
