package runctl

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
)

// Op is a request to a run's supervisor, made over its control socket.
type Op string

// The requests a supervisor takes.
const (
	// OpStop stops the run: SIGTERM to the job, SIGKILL after the run's
	// --stop-timeout; no restart.
	OpStop Op = "stop"
	// OpKill stops the run at once: SIGKILL to the job.
	OpKill Op = "kill"
	// OpRestart ends the running attempt as OpStop does and starts the
	// next one at once, whatever the restart policy says and without
	// counting against --max-restarts; with --resume-from it resumes from
	// the newest checkpoint that passes the check. A second one while the
	// attempt is ending kills it at once.
	OpRestart Op = "restart"
)

// ControlFile is the file in a run's directory that names its control
// socket (the socket itself lives where a path is short and private: see
// probe.SupervisorSocket).
const ControlFile = "control"

// maxRequest bounds one request or reply line.
const maxRequest = 1024

// requestTimeout bounds a whole exchange on the control socket.
const requestTimeout = 5 * time.Second

type wireRequest struct {
	Op Op `json:"op"`
}

type wireReply struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// Control is a supervisor's control socket: it takes requests (Op) from
// processes of the supervisor's own user or root (checked by the peer
// credentials the kernel gives, besides the socket's mode 0600 in a private
// directory) and delivers them on Requests. Signals are not requests: a
// scheduler or a container runtime sends them to every process of a job,
// so every signal a job may handle is the job's (see package supervise).
type Control struct {
	ln      *net.UnixListener
	path    string
	pointer string
	reqs    chan Op
	wg      sync.WaitGroup
	once    sync.Once
}

// ListenControl creates the control socket at sock (mode 0600; its
// directory must be private to this user, as probe.SupervisorSocket makes
// it) and names it in runDir/ControlFile, creating runDir (0700) when
// missing. Close removes both.
func ListenControl(runDir, sock string) (*Control, error) {
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if st, err := os.Lstat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(sock)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	pointer := filepath.Join(runDir, ControlFile)
	tmp := pointer + ".tmp"
	err = os.WriteFile(tmp, []byte(sock+"\n"), 0o600)
	if err == nil {
		err = os.Rename(tmp, pointer)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: name it in the run directory: %w", err)
	}
	c := &Control{ln: ln, path: sock, pointer: pointer, reqs: make(chan Op, 8)}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

// Requests delivers the requests accepted, in order. It is never closed: a
// supervisor stops reading it when the run ends.
func (c *Control) Requests() <-chan Op { return c.reqs }

// Path is the socket's path.
func (c *Control) Path() string { return c.path }

// Close stops taking requests and removes the socket and the file that
// names it.
func (c *Control) Close() error {
	var err error
	c.once.Do(func() {
		err = c.ln.Close()
		c.wg.Wait()
		_ = os.Remove(c.pointer)
	})
	return err
}

func (c *Control) accept() {
	defer c.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE, ENFILE, ECONNABORTED: the socket stays; retry after
			// a pause, as net/http does, so a request later still arrives.
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer conn.Close()
			c.serve(conn)
		}()
	}
}

// serve answers one connection's one request.
func (c *Control) serve(conn *net.UnixConn) {
	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	reply := func(err error) {
		r := wireReply{OK: err == nil}
		if err != nil {
			r.Error = err.Error()
		}
		b, _ := json.Marshal(r)
		_, _ = conn.Write(append(b, '\n'))
	}
	// the request is read first, so that a refused caller reads the
	// refusal rather than a broken pipe
	line, rerr := bufio.NewReaderSize(&limitReader{conn, maxRequest}, maxRequest).ReadSlice('\n')
	uid, _, err := peer(conn)
	if err != nil {
		reply(err)
		return
	}
	if uid != os.Geteuid() && uid != 0 {
		reply(fmt.Errorf("uid %d may not control a run of uid %d", uid, os.Geteuid()))
		return
	}
	if rerr != nil {
		reply(fmt.Errorf("read the request: %v", rerr))
		return
	}
	var req wireRequest
	if err := json.Unmarshal(line, &req); err != nil {
		reply(fmt.Errorf("the request is not JSON: %v", err))
		return
	}
	switch req.Op {
	case OpStop, OpKill, OpRestart:
	default:
		reply(fmt.Errorf("unknown request %q", req.Op))
		return
	}
	select {
	case c.reqs <- req.Op:
		reply(nil)
	default:
		reply(errors.New("too many requests waiting"))
	}
}

// peer returns the uid and pid of the process at the other end of conn.
func peer(conn *net.UnixConn) (uid, pid int, err error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, fmt.Errorf("peer credentials: %w", cerr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// limitReader reads at most n bytes.
type limitReader struct {
	c *net.UnixConn
	n int
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.c.Read(p)
	l.n -= n
	return n, err
}

// Request sends op to the supervisor of r over its control socket, after
// checking that r is running and that its supervisor is still the process
// that recorded it (PID and start time), and that the socket's other end is
// that process, so a reused PID or another process's socket never gets the
// request. The error matches ErrNotRunning when there is nothing to ask,
// and syscall.EPERM when the caller may not control the run's owner's
// runs.
func Request(fs procfs.FS, r *store.Run, op Op) error {
	if err := checkRunning(fs, r); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, ControlFile))
	switch {
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s run %s: %w", op, r.ID, syscall.EPERM)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s run %s: its supervisor (pid %d) has no control socket", op, r.ID, r.SupervisorPID)
	case err != nil:
		return fmt.Errorf("%s run %s: %w", op, r.ID, err)
	}
	sock := strings.TrimSpace(string(b))
	d := net.Dialer{Timeout: requestTimeout}
	nc, err := d.Dial("unix", sock)
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("%s run %s: %v: %w", op, r.ID, err, syscall.EPERM)
		}
		return fmt.Errorf("%s run %s: the supervisor's control socket: %w", op, r.ID, err)
	}
	conn := nc.(*net.UnixConn)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	if _, pid, err := peer(conn); err != nil {
		return fmt.Errorf("%s run %s: %w", op, r.ID, err)
	} else if pid != r.SupervisorPID {
		return fmt.Errorf("%s run %s: the control socket %s is pid %d's, not the supervisor's (pid %d)", op, r.ID, sock, pid, r.SupervisorPID)
	}
	req, _ := json.Marshal(wireRequest{Op: op})
	if _, err := conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("%s run %s: %w", op, r.ID, err)
	}
	line, err := bufio.NewReaderSize(&limitReader{conn, maxRequest}, maxRequest).ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("%s run %s: no answer from its supervisor: %w", op, r.ID, err)
	}
	var rep wireReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return fmt.Errorf("%s run %s: the supervisor's answer is not JSON: %v", op, r.ID, err)
	}
	if !rep.OK {
		if strings.Contains(rep.Error, "may not control") {
			return fmt.Errorf("%s run %s: %s: %w", op, r.ID, rep.Error, syscall.EPERM)
		}
		return fmt.Errorf("%s run %s: the supervisor refused: %s", op, r.ID, rep.Error)
	}
	return nil
}
