"""The wire: a non-blocking connection to a Unix socket with a bounded send
buffer, and the JSON the probe's lines are written in (docs/PROBE.md).

A send never blocks the job: what the reader has not taken waits in the
buffer, and a full buffer drops the message (counted in `dropped`).
"""

import threading
import time

# The C module: socket.py would also import selectors, math and select,
# each costing every probed process start-up time.
try:
    import _socket as socket
except ImportError:  # pragma: no cover
    import socket

MAX_PENDING = 4 << 20  # bytes buffered for a slow reader before dropping

_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


class Conn:
    """A non-blocking unix stream connection with a bounded send buffer."""

    def __init__(self, sock, limit=MAX_PENDING):
        self.sock = sock
        self.buf = bytearray()
        self.limit = limit
        self.lock = threading.Lock()
        self.dead = False
        self.dropped = 0

    @classmethod
    def open(cls, path, timeout=1.0, limit=MAX_PENDING):
        """Connect to path, waiting at most timeout seconds (0: not at all;
        a listener whose backlog is full then counts as absent)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if timeout > 0:
                s.settimeout(timeout)
            else:
                s.setblocking(False)
            s.connect(path)
            s.setblocking(False)
        except (OSError, ValueError):
            s.close()
            return None
        return cls(s, limit)

    def send(self, data):
        if not self.lock.acquire(timeout=0.5):
            self.dropped += 1
            return
        try:
            if self.dead:
                return
            if len(self.buf) + len(data) > self.limit:
                self.dropped += 1
                return
            self.buf += data
            self._flush_locked()
        finally:
            self.lock.release()

    def _flush_locked(self):
        while self.buf and not self.dead:
            try:
                n = self.sock.send(self.buf, _MSG_NOSIGNAL)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._die()
                return
            del self.buf[:n]

    def flush(self, timeout):
        deadline = time.monotonic() + timeout
        if not self.lock.acquire(timeout=timeout):
            return
        try:
            while self.buf and not self.dead:
                self._flush_locked()
                left = deadline - time.monotonic()
                if not self.buf or left <= 0:
                    break
                import select

                select.select([], [self.sock], [], left)
        except (OSError, ValueError):
            self._die()
        finally:
            self.lock.release()

    def _die(self):
        self.dead = True
        self.buf = bytearray()
        try:
            self.sock.close()
        except OSError:
            pass

    def close(self):
        with self.lock:
            self._die()


def alive(conn):
    return conn is not None and not conn.dead


# A JSON encoder for the probe's own messages (dicts, lists, str, int, float,
# bool, None): importing the json package costs a process more start-up time
# than the probe's whole remaining work.
_ESC = {i: "\\u%04x" % i for i in range(0x20)}
_ESC.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"})


def dumps(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return repr(v) if v == v and v not in (float("inf"), float("-inf")) else "null"
    if isinstance(v, str):
        return '"' + v.translate(_ESC) + '"'
    if isinstance(v, dict):
        return "{" + ",".join(dumps(str(k)) + ":" + dumps(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dumps(x) for x in v) + "]"
    return dumps(str(v))


def err(exc):
    return ("%s: %s" % (type(exc).__name__, exc))[:2000]

