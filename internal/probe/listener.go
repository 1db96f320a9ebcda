package probe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxLine bounds one message; a longer line is reported as TypeInvalid and the
// connection is dropped.
const maxLine = 1 << 20

// maxSocketPath is the longest path a Unix socket can be bound at on Linux
// (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// Listener accepts probe connections on a Unix socket and delivers their
// messages, in order per connection, on one channel.
type Listener struct {
	path string
	ln   *PeerListener
	// idle closes a connection that sends nothing for that long (0:
	// never): a shared socket's, so that idle holders cannot keep
	// descriptors
	idle time.Duration
	msgs chan Message
	done chan struct{}

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
}

// Listen creates the socket at path (mode 0600; its directory is created
// 0700 when missing) and starts accepting. A stale socket file from an
// earlier run is replaced. The path must fit a Unix socket (107 bytes).
func Listen(path string) (*Listener, error) { return listenMode(path, 0o600, 0o700, false) }

// ListenShared is Listen for a machine-wide agent that takes every user's
// probes: the socket is mode 0666 and a missing directory is created
// 0755. Each connection is attributed by its peer credentials
// (Message.PeerPID, PeerUID), never by what its messages claim. As any
// user may connect, each UID holds a bounded number of connections at once
// (LimitListener), and a connection that sends nothing for SharedIdle is
// closed (a probe reports every second or so, and dials again).
func ListenShared(path string) (*Listener, error) { return listenMode(path, 0o666, 0o755, true) }

// SharedIdle is how long a connection to a shared probe socket may send
// nothing before it is closed.
var SharedIdle = 5 * time.Minute

func listenMode(path string, mode, dirMode os.FileMode, shared bool) (*Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("probe socket %s: path is %d bytes, a unix socket path can have at most %d", path, len(path), maxSocketPath)
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return nil, fmt.Errorf("probe socket dir: %w", err)
		}
	}
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	// The socket is created with the umask applied; restricting the umask
	// around bind would race with other goroutines, so the file is created
	// and then narrowed before anything can connect through a wider mode
	// (connect needs write permission; nobody else has it on a 0700 dir,
	// and where the dir is wider the window is the few microseconds
	// between bind and chmod).
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("probe socket: %w", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("probe socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	l := &Listener{
		path:  path,
		ln:    retryListener(ln),
		msgs:  make(chan Message, 1024),
		done:  make(chan struct{}),
		conns: map[net.Conn]struct{}{},
	}
	if shared {
		l.ln, l.idle = LimitListener(ln), SharedIdle
	}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Messages delivers every message from every connection; it is closed after
// Close. A slow reader slows the probes' sends, never the jobs: a probe drops
// messages (and counts them) rather than block.
func (l *Listener) Messages() <-chan Message { return l.msgs }

// Close stops accepting, closes all connections, waits for their readers and
// closes the Messages channel. Messages not yet read are discarded.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		err = l.ln.Close()
		for c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
		close(l.done)
		l.wg.Wait()
		close(l.msgs)
	})
	return err
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed: Accept retries every other failure
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.serve(c)
	}
}

// Refused counts the connections closed because their UID held the most
// a shared socket allows (0 on a private one).
func (l *Listener) Refused() int64 { return l.ln.Refused() }

func (l *Listener) serve(c net.Conn) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
		c.Close()
	}()
	peer, peerUID := PeerOf(c)
	lastPID := peer
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for {
		if l.idle > 0 {
			c.SetReadDeadline(time.Now().Add(l.idle))
		}
		if !sc.Scan() {
			break
		}
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m Message
		if err := json.Unmarshal(line, &m); err != nil || m.Type == "" {
			m = Message{Type: TypeInvalid, Line: truncate(string(line), 512)}
		}
		m.PeerPID, m.PeerUID = peer, peerUID
		if m.PID != 0 {
			lastPID = m.PID
		}
		if !l.deliver(m) {
			return
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		if !l.deliver(Message{Type: TypeInvalid, PID: lastPID, PeerPID: peer, PeerUID: peerUID, Line: "line longer than 1 MiB"}) {
			return
		}
	}
	l.deliver(Message{Type: TypeDisconnect, PID: lastPID, PeerPID: peer, PeerUID: peerUID})
}

func (l *Listener) deliver(m Message) bool {
	select {
	case l.msgs <- m:
		return true
	case <-l.done:
		return false
	}
}

// PeerCred is the PID and UID of the process at the other end of a Unix
// connection, as the kernel recorded them when it connected (SO_PEERCRED);
// 0 and -1 when they cannot be read.
func PeerCred(c *net.UnixConn) (pid, uid int) {
	pid, uid = 0, -1
	raw, err := c.SyscallConn()
	if err != nil {
		return pid, uid
	}
	_ = raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			pid, uid = int(cred.Pid), int(cred.Uid)
		}
	})
	return pid, uid
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
