package supervise

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// Why the shim does not start the job with os.StartProcess: Go forks with
// vfork (CLONE_VM|CLONE_VFORK), so the job's first exec runs on the shim's
// own address space, and the kernel folds that address space's high-water
// mark (the shim's ~20 MiB, mostly the mapped vramguard binary) into the
// job's max RSS (ru_maxrss, exec_mmap's setmax_mm_hiwater_rss). Every job
// would then report a peak of at least the shim's size. A real fork copies
// only the shim's anonymous pages (a few MiB: file-backed mappings are not
// copied), which is what any fork-and-exec launcher (a shell, /usr/bin/time)
// leaves in a child's ru_maxrss too.

// spawnScratch is everything the forked child touches: allocated by the
// parent, so that the child runs no Go code that could allocate, grow its
// stack or take a runtime lock before it execs.
type spawnScratch struct {
	path    *byte
	argv    **byte
	envp    **byte
	ppid    uintptr
	errPipe uintptr
	oldMask uint64
	allMask uint64
	dfl     [8]uint64 // a zeroed sigaction: SIG_DFL, no flags, empty mask
	cur     [8]uint64 // a sigaction read back
	errno   uint32
}

// spawnJob forks and execs path with argv in its own process group, with
// the parent-death signal SIGKILL, inheriting the shim's stdio, environment
// and working directory. It returns the job's PID once exec succeeded.
func spawnJob(path string, argv []string) (int, error) {
	sc := &spawnScratch{allMask: ^uint64(0)}
	var err error
	if sc.path, err = syscall.BytePtrFromString(path); err != nil {
		return 0, err
	}
	av, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return 0, err
	}
	ev, err := syscall.SlicePtrFromStrings(os.Environ())
	if err != nil {
		return 0, err
	}
	sc.argv, sc.envp = &av[0], &ev[0]
	var p [2]int
	syscall.ForkLock.Lock()
	err = syscall.Pipe2(p[:], syscall.O_CLOEXEC)
	if err != nil {
		syscall.ForkLock.Unlock()
		return 0, fmt.Errorf("pipe: %w", err)
	}
	sc.errPipe, sc.ppid = uintptr(p[1]), uintptr(os.Getpid())

	// Signals stay blocked from before the fork until the child has put
	// the default handlers back (Go's handlers must never run in it).
	runtime.LockOSThread()
	rawSigmask(&sc.allMask, &sc.oldMask)
	pid, errno := forkExec(sc)
	rawSigmask(&sc.oldMask, nil)
	runtime.UnlockOSThread()
	syscall.ForkLock.Unlock()
	syscall.Close(p[1])
	runtime.KeepAlive(av)
	runtime.KeepAlive(ev)
	if errno != 0 {
		syscall.Close(p[0])
		return 0, fmt.Errorf("fork: %w", errno)
	}
	// The pipe closes on exec; four bytes are the errno of a failed exec.
	var b [4]byte
	n := 0
	for n < 4 {
		m, err := syscall.Read(p[0], b[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
	}
	syscall.Close(p[0])
	if n == 4 {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		e := syscall.Errno(*(*uint32)(unsafe.Pointer(&b[0])))
		return 0, &os.PathError{Op: "fork/exec", Path: path, Err: e}
	}
	return pid, nil
}

func rawSigmask(set, old *uint64) {
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, uintptr(unsafe.Pointer(set)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
}

// forkExec forks; the child execs and never returns. Only raw system calls
// run in the child: they are assembly that neither grows the stack nor
// enters the scheduler, and this function is nosplit, as Go's own
// forkAndExecInChild once was for the same reason.
//
//go:nosplit
//go:norace
func forkExec(sc *spawnScratch) (int, syscall.Errno) {
	r1, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if r1 != 0 {
		return int(r1), 0
	}
	// The child.
	syscall.RawSyscall(syscall.SYS_SETPGID, 0, 0, 0)
	syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0, 0)
	if r, _, _ := syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0); r != sc.ppid {
		// the shim died before the death signal was armed
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 1, 0, 0)
	}
	for s := uintptr(1); s <= 64; s++ {
		if s == uintptr(syscall.SIGKILL) || s == uintptr(syscall.SIGSTOP) {
			continue
		}
		// a caught signal gets its default back; an ignored one stays ignored
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, s, 0, uintptr(unsafe.Pointer(&sc.cur[0])), 8, 0, 0); e == 0 && sc.cur[0] > 1 {
			syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, s, uintptr(unsafe.Pointer(&sc.dfl[0])), 0, 8, 0, 0)
		}
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2, uintptr(unsafe.Pointer(&sc.oldMask)), 0, 8, 0, 0)
	_, _, e = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(sc.path)), uintptr(unsafe.Pointer(sc.argv)), uintptr(unsafe.Pointer(sc.envp)))
	sc.errno = uint32(e)
	syscall.RawSyscall(syscall.SYS_WRITE, sc.errPipe, uintptr(unsafe.Pointer(&sc.errno)), 4)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 127, 0, 0)
	}
}
