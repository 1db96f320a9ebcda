package probe

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A socket every user may connect to (the shared probe and API sockets) is
// one any user could fill with idle connections until its server runs out
// of file descriptors. LimitListener bounds what each user may hold:
//
//   - each peer UID (SO_PEERCRED) holds at most a bound of connections at
//     once; one beyond it is closed as soon as it is accepted (and counted);
//   - the bound is PeerConnsMax, or an eighth of the process's descriptor
//     limit (RLIMIT_NOFILE) when that is less, so that one user never holds
//     more than a fraction of what the server has;
//   - a failed accept (EMFILE, ENFILE, ECONNABORTED, ...) is retried after a
//     pause (5 ms, doubling to 1 s), as net/http does: only closing the
//     listener ends the loop.

// PeerConnsMax is the most connections one UID may hold at once on a
// limited listener.
const PeerConnsMax = 256

// PeerListener is a Unix listener whose connections are bounded per peer
// UID (see LimitListener). It implements net.Listener.
type PeerListener struct {
	ln      *net.UnixListener
	max     int
	mu      sync.Mutex
	held    map[int]int
	refused atomic.Int64
}

// LimitListener wraps ln (see above). Its connections are *PeerConn.
func LimitListener(ln *net.UnixListener) *PeerListener {
	return &PeerListener{ln: ln, max: peerBound(), held: map[int]int{}}
}

// retryListener is LimitListener without the bound, for a socket only its
// owner may reach: accepts are still retried after a failure.
func retryListener(ln *net.UnixListener) *PeerListener {
	return &PeerListener{ln: ln, held: map[int]int{}}
}

// peerBound is PeerConnsMax, or an eighth of the descriptor limit when
// that is less (at least 4).
func peerBound() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY {
		return max(4, min(PeerConnsMax, int(rl.Cur/8)))
	}
	return PeerConnsMax
}

// Accept waits for the next connection a peer UID may hold; it returns an
// error only once the listener is closed.
func (l *PeerListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			// out of descriptors, or a connection aborted before it was
			// accepted: wait and try again, never give up
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		pid, uid := PeerCred(c)
		l.mu.Lock()
		if l.max > 0 && l.held[uid] >= l.max {
			l.mu.Unlock()
			l.refused.Add(1)
			c.Close()
			continue
		}
		l.held[uid]++
		l.mu.Unlock()
		return &PeerConn{UnixConn: c, PID: pid, UID: uid, l: l}, nil
	}
}

// Close closes the listener.
func (l *PeerListener) Close() error { return l.ln.Close() }

// Addr is the listener's address.
func (l *PeerListener) Addr() net.Addr { return l.ln.Addr() }

// Refused counts the connections closed because their UID held the bound.
func (l *PeerListener) Refused() int64 { return l.refused.Load() }

// Bound is the most connections one UID may hold at once (0: no bound).
func (l *PeerListener) Bound() int { return l.max }

// PeerConn is a connection a PeerListener accepted, with its peer's PID and
// UID as the kernel recorded them when it connected; closing it frees its
// UID's place.
type PeerConn struct {
	*net.UnixConn
	PID, UID int
	l        *PeerListener
	once     sync.Once
}

// Close closes the connection and frees its place.
func (c *PeerConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.held[c.UID]--; c.l.held[c.UID] <= 0 {
			delete(c.l.held, c.UID)
		}
		c.l.mu.Unlock()
	})
	return c.UnixConn.Close()
}

// PeerOf is the PID and UID at the other end of a Unix connection (a
// *net.UnixConn or a *PeerConn); 0 and -1 when they cannot be read.
func PeerOf(c net.Conn) (pid, uid int) {
	switch c := c.(type) {
	case *PeerConn:
		return c.PID, c.UID
	case *net.UnixConn:
		return PeerCred(c)
	}
	return 0, -1
}
