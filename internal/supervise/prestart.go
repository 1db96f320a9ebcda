package supervise

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A shim takes about as long to start as the supervisor takes to open its
// state database, write the probe and record the attempt (a Go process of
// a 30 MB binary: runtime, package initialisation, page faults). Started
// at once and told later what to run, the two overlap, and a job starts
// that much sooner.

// shimSpec is what a shim started ahead (--spec-fd) reads before it runs
// the job: what exec.Cmd would otherwise have given it.
type shimSpec struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
}

// Shim is a shim process and the pipes the supervisor keeps of it: the
// job's stdout and stderr, the shim's status lines, and its exit.
type Shim struct {
	pid                int
	outR, errR, status *os.File
	done               chan error
	// spec is where a shim started ahead reads its shimSpec; nil once sent.
	spec *os.File
	once sync.Once
}

// PrestartShim starts a shim ahead of the first attempt: it waits for
// what to run (see Shim.Run) and exits quietly if the supervisor never
// says (Shim.Abort, or the supervisor's death). self is the vramguard
// executable; command is shown on the shim's command line only; stdin is
// the job's (nil: none).
func PrestartShim(self string, command []string, stdin io.Reader) (*Shim, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := append([]string{ShimCommand, "--spec-fd", "4", "--"}, command...)
	sh, err := startShim(self, args, nil, "", stdin, specR)
	specR.Close()
	if err != nil {
		specW.Close()
		return nil, err
	}
	sh.spec = specW
	return sh, nil
}

// Run tells a shim started ahead what to run: the job's argv, environment
// and directory.
func (sh *Shim) Run(argv, env []string, dir string) error {
	if sh.spec == nil {
		return fmt.Errorf("the shim was already told what to run")
	}
	b, _ := json.Marshal(shimSpec{Argv: argv, Env: env, Dir: dir})
	_, err := sh.spec.Write(b)
	sh.spec.Close()
	sh.spec = nil
	return err
}

// Abort ends a shim started ahead that will not be used: it reads no
// spec and exits. Safe to call more than once, and after Run (then it does
// nothing).
func (sh *Shim) Abort() {
	if sh == nil {
		return
	}
	sh.once.Do(func() {
		if sh.spec == nil {
			return // in use by an attempt, which waits for it
		}
		sh.spec.Close()
		sh.spec = nil
		sh.wait()
	})
}

// wait waits for the shim to exit and closes the supervisor's ends of its
// pipes: for a shim no attempt copies from.
func (sh *Shim) wait() {
	<-sh.done
	sh.outR.Close()
	sh.errR.Close()
	sh.status.Close()
}

// startShim starts `self args...` as a shim: in its own process group,
// with the job's stdout and stderr on two new pipes (read in blocking mode:
// see blockingPipe), its status pipe on fd 3 and extra (if any) on fd 4.
// env nil is the supervisor's; dir "" its directory.
func startShim(path string, args, env []string, dir string, stdin io.Reader, extra *os.File) (*Shim, error) {
	outR, outW, err := blockingPipe("stdout")
	if err != nil {
		return nil, err
	}
	errR, errW, err := blockingPipe("stderr")
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, err
	}
	// A bigger pipe lets a burst of output wait in the kernel instead of
	// blocking the job on every 64 KiB; failure just keeps the default.
	for _, p := range []*os.File{outR, errR} {
		if rc, err := p.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
		}
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = outW, errW
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.ExtraFiles = []*os.File{stW}
	if extra != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, extra)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGUSR1}

	// PR_SET_PDEATHSIG fires when the thread that forked exits, so the
	// shim is started and waited for on one locked OS thread.
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	err = <-started
	outW.Close()
	errW.Close()
	stW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		stR.Close()
		return nil, err
	}
	return &Shim{pid: cmd.Process.Pid, outR: outR, errR: errR, status: stR, done: done}, nil
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
