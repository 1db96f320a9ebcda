"""The probe proper: sampling thread, torch hooks, wire format.

Rules this module keeps, whatever happens:

- It never prints. Nothing reaches stdout or stderr from here.
- It never raises into the job. Its own failures are reported once on the
  socket (an "error" line) and then it goes quiet.
- It never initialises CUDA: every torch.cuda call is behind
  torch.cuda.is_initialized(), and hooks that need CUDA are queued with
  torch.cuda._lazy_call so they run when the job itself initialises it.
- It costs nothing until torch is imported beyond a dormant import hook, and
  it never blocks the job on the socket: sends are non-blocking, a full
  buffer drops messages (counted in the next sample's "dropped").
- The agent's socket (VRAMGUARD_AGENT_SOCKET, set by `vramguard run` next to
  its own socket) gets the same messages, best effort: it is never waited
  for (a non-blocking connect at start, then retries from the sampler
  thread every AGENT_RETRY_S seconds while it is missing or dead), and it
  has a smaller buffer that drops when full.

Standard library only. The wire format is documented in docs/PROBE.md.
"""

import atexit
import os
import sys
import threading
import time

# The C modules: socket.py would also import selectors, math and select,
# and signal.py imports enum, each costing every probed process start-up time.
try:
    import _signal as signal
    import _socket as socket
except ImportError:  # pragma: no cover
    import signal
    import socket

PROTOCOL = 1
VERSION = "0.1.0"

ENV_SOCKET = "VRAMGUARD_PROBE_SOCKET"
ENV_HZ = "VRAMGUARD_PROBE_HZ"
ENV_RUN_DIR = "VRAMGUARD_RUN_DIR"
ENV_OOM_SNAPSHOT = "VRAMGUARD_OOM_SNAPSHOT"
ENV_ATOMIC_SAVE = "VRAMGUARD_ATOMIC_SAVE"
ENV_RUN_ID = "VRAMGUARD_RUN_ID"
ENV_ATTEMPT = "VRAMGUARD_ATTEMPT"
ENV_AGENT_SOCKET = "VRAMGUARD_AGENT_SOCKET"

DEFAULT_HZ = 1.0
MAX_HZ = 20.0
MIN_HZ = 0.01
SNAPSHOT_MAX_ENTRIES = 100000
MAX_OOM_DUMPS = 3  # summary/snapshot files per process
MAX_OOM_EVENTS = 100  # "oom" lines per process
MAX_PENDING = 4 << 20  # bytes buffered for a slow reader before dropping
AGENT_MAX_PENDING = 256 << 10  # the same for the agent's socket
AGENT_RETRY_S = 30.0  # between attempts to reach a missing or dead agent
AGENT_FLUSH_S = 0.25  # at most this long at exit for the agent to take the last lines
STACK_SIGNAL = signal.SIGUSR2
SAVE_TMP_PREFIX = ".vramguard-save-"

_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# Step counters are plain module globals: incrementing one is the whole cost
# of the optimizer hook.
_optimizer_steps = 0
_user_steps = 0

_p = None  # the running probe of this process, or None
_start_lock = threading.Lock()
_hooks_installed = False  # import hook, fork hooks, atexit: once per interpreter
_torch_done = False  # torch patched (or deliberately left alone)
_torch_lock = threading.Lock()


def step(n=1):
    """Count n training steps, for loops that do not use torch.optim."""
    global _user_steps
    _user_steps += n


def event(type, **fields):
    """Send one message of the given type with fields on the probe's
    connections; a no-op when the probe is not running. For the notebook
    side (cells, autosaves), which keeps its own logic in its own modules."""
    try:
        p = _p
        if p is not None and p.pid == os.getpid() and p.reporting():
            fields["type"] = type
            p.send(fields)
    except BaseException:
        pass


def start(socket_path=None, hz=None, run_dir=None, oom_snapshot=None, atomic_save=None, run_id=None):
    """Start the probe in this process (idempotent). Arguments default to the
    VRAMGUARD_* environment variables; without a socket there, the machine-wide
    agent's socket under the vramguard state directory is tried."""
    global _p
    try:
        with _start_lock:
            if _p is not None:
                return
            cfg = _Config.from_env(os.environ)
            if socket_path is not None:
                cfg.socket_path = os.fspath(socket_path)
            elif not cfg.socket_path:
                cfg.socket_path = _default_socket(os.environ)
            if hz is not None:
                cfg.hz = _clamp_hz(hz)
            if run_dir is not None:
                cfg.run_dir = os.fspath(run_dir)
            if oom_snapshot is not None:
                cfg.oom_snapshot = bool(oom_snapshot)
            if atomic_save is not None:
                cfg.atomic_save = bool(atomic_save)
            if run_id is not None:
                cfg.run_id = str(run_id)
            _begin(cfg, forked=False)
    except BaseException:
        pass


def start_from_env():
    """Start the probe when vramguard launched this process (sitecustomize)."""
    global _p
    try:
        cfg = _Config.from_env(os.environ)
        if not cfg.socket_path and not cfg.agent_path and not cfg.atomic_save and not cfg.run_dir:
            return
        with _start_lock:
            if _p is None:
                _begin(cfg, forked=False)
    except BaseException:
        pass


def stop():
    """Stop sampling and close the connection; torch hooks stay but idle."""
    global _p
    try:
        with _start_lock:
            p, _p = _p, None
        if p is not None:
            p.close(final=True)
    except BaseException:
        pass


# --------------------------------------------------------------------------
# configuration


class _Config:
    def __init__(self):
        self.socket_path = ""
        self.hz = DEFAULT_HZ
        self.run_dir = ""
        self.oom_snapshot = False
        self.atomic_save = False
        self.run_id = ""
        self.attempt = 0
        self.agent_path = ""

    def file_prefix(self, kind, pid):
        """RUN_DIR/<kind>-[<attempt>-]<pid>"""
        if self.attempt > 0:
            return os.path.join(self.run_dir, "%s-%d-%d" % (kind, self.attempt, pid))
        return os.path.join(self.run_dir, "%s-%d" % (kind, pid))

    @classmethod
    def from_env(cls, env):
        c = cls()
        c.socket_path = env.get(ENV_SOCKET, "")
        c.hz = _clamp_hz(env.get(ENV_HZ) or DEFAULT_HZ)
        c.run_dir = env.get(ENV_RUN_DIR, "")
        c.oom_snapshot = env.get(ENV_OOM_SNAPSHOT, "") not in ("", "0")
        c.atomic_save = env.get(ENV_ATOMIC_SAVE, "") not in ("", "0")
        c.run_id = env.get(ENV_RUN_ID, "")
        c.agent_path = env.get(ENV_AGENT_SOCKET, "")
        try:
            c.attempt = max(int(env.get(ENV_ATTEMPT) or 0), 0)
        except ValueError:
            c.attempt = 0
        return c


def _clamp_hz(v):
    try:
        hz = float(v)
    except (TypeError, ValueError):
        return DEFAULT_HZ
    if not hz > 0:  # also catches NaN
        return DEFAULT_HZ
    return min(max(hz, MIN_HZ), MAX_HZ)


def _default_socket(env):
    home = env.get("VRAMGUARD_HOME")
    if not home:
        xdg = env.get("XDG_STATE_HOME")
        if xdg:
            home = os.path.join(xdg, "vramguard")
        else:
            home = os.path.join(os.path.expanduser("~"), ".local", "state", "vramguard")
    return os.path.join(home, "probe.sock")


# --------------------------------------------------------------------------
# connection


class _Conn:
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


# --------------------------------------------------------------------------
# the probe of one process


def _begin(cfg, forked):
    global _p
    _install_interpreter_hooks()
    p = _Probe(cfg)
    _p = p
    p.begin(forked)


class _Probe:
    def __init__(self, cfg):
        self.cfg = cfg
        self.pid = os.getpid()
        self.conn = None  # VRAMGUARD_PROBE_SOCKET
        # VRAMGUARD_AGENT_SOCKET: a second reader of the same lines, best
        # effort. It is dialled once at start without waiting, then again by
        # the sampler thread (never the job's threads) AGENT_RETRY_S after a
        # failed attempt or a dead connection, so an agent started or
        # restarted later is found.
        self.agent = None
        self.agent_path = cfg.agent_path if cfg.agent_path and not _same_path(cfg.agent_path, cfg.socket_path) else ""
        self.agent_next = 0.0  # time.monotonic() of the next attempt
        self.hello = None
        self.failed = False
        self.stop_evt = threading.Event()
        self.thread = None
        self.seq = 0
        self.ndev = None
        self.cuda_hooked = False
        self.history_on = False
        self.observer_on = False
        self.oom_count = 0
        self.stack_file = None
        self.stack_path = ""
        self.statm = None  # fd of /proc/self/statm, kept open: one pread per sample
        # The process's place in a distributed job, reported once the
        # process group exists; a forked child (a DataLoader worker) did not
        # join it and reports none.
        self.forked = False
        self.dist_sent = False

    # lifecycle ----------------------------------------------------------

    def begin(self, forked):
        cfg = self.cfg
        self.forked = forked
        if cfg.run_dir:
            self._register_stacks()
        if cfg.socket_path:
            self.conn = _Conn.open(cfg.socket_path)
        if self.conn is not None or self.agent_path:
            hello = {
                "type": "hello",
                "ppid": os.getppid(),
                "argv": _argv(),
                "executable": sys.executable,
                "python": "%d.%d.%d" % sys.version_info[:3],
                "probe": VERSION,
                "run_id": cfg.run_id,
                "attempt": cfg.attempt,
                "hz": cfg.hz,
                "forked": forked,
            }
            self.hello = hello
            self.send(self._hello())
        if self.agent_path:
            # The first attempt is the start-up's, so the agent hears all
            # of a process it is there for; retries are the sampler's.
            self.dial_agent()
        torch = sys.modules.get("torch")
        if torch is not None and not _initializing(torch):
            _on_torch_imported(torch)
        self.start_thread()

    def start_thread(self):
        if self.failed or not (_alive(self.conn) or self.agent_path):
            return
        self.stop_evt = threading.Event()
        t = threading.Thread(target=self._loop, name="vramguard-probe", daemon=True)
        self.thread = t
        t.start()

    def stop_thread(self, timeout):
        self.stop_evt.set()
        t = self.thread
        self.thread = None
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def close(self, final):
        self.stop_thread(2.0)
        conn, agent = self.conn, self.agent
        if _alive(conn) or _alive(agent):
            if final and not self.failed:
                try:
                    self.report_dist()
                    self.send(self.sample())
                except BaseException:
                    pass
                self.send({"type": "bye"})
        if _alive(conn):
            conn.flush(1.0)
            conn.close()
        if _alive(agent):
            agent.flush(AGENT_FLUSH_S)
            agent.close()
        self._close_stacks()
        self._close_statm()

    def _close_statm(self):
        fd, self.statm = self.statm, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def abandon(self):
        """In a forked child: drop the parent's connections without a word."""
        conns = (self.conn, self.agent)
        self.conn = self.agent = None
        for conn in conns:
            if conn is not None:
                try:
                    conn.sock.close()
                except OSError:
                    pass
        self._close_statm()  # the parent's /proc/<pid>/statm

    # sending --------------------------------------------------------------

    def send(self, msg):
        """Send msg on every open connection. A sample carries the count of
        messages that connection has dropped."""
        conn, agent = self.conn, self.agent
        if not _alive(conn) and not _alive(agent):
            return
        msg["v"] = PROTOCOL
        msg["pid"] = self.pid
        msg["ts"] = time.time()
        body = _dumps(msg)
        line = None
        sample = msg.get("type") == "sample"
        for c in (conn, agent):
            if not _alive(c):
                continue
            if sample and c.dropped:
                c.send((body[:-1] + ',"dropped":%d}\n' % c.dropped).encode("utf-8", "surrogateescape"))
                continue
            if line is None:
                line = (body + "\n").encode("utf-8", "surrogateescape")
            c.send(line)

    def _hello(self):
        hello = dict(self.hello)
        torch = sys.modules.get("torch")
        if torch is not None:
            hello["torch"] = str(getattr(torch, "__version__", ""))
        return hello

    def dial_agent(self):
        """Try the agent's socket once, without waiting; on success the new
        connection gets this process's hello before anything else."""
        self.agent_next = time.monotonic() + AGENT_RETRY_S
        c = _Conn.open(self.agent_path, timeout=0, limit=AGENT_MAX_PENDING)
        if c is None:
            return
        msg = self._hello()
        msg["v"] = PROTOCOL
        msg["pid"] = self.pid
        msg["ts"] = time.time()
        c.send((_dumps(msg) + "\n").encode("utf-8", "surrogateescape"))
        old, self.agent = self.agent, c
        if old is not None:
            old.close()

    def flush_now(self):
        """The process may be about to die: give the supervisor's reader a
        second to take what is buffered, the agent's none."""
        if _alive(self.conn):
            self.conn.flush(1.0)
        if _alive(self.agent):
            self.agent.flush(0)

    def report_dist(self):
        """Send the process's rank once torch.distributed's process group
        exists (a "dist" line, once)."""
        if self.dist_sent or self.forked or not _torch_done:
            return
        msg = _dist_view()
        if msg is not None:
            self.dist_sent = True
            self.send(msg)

    def reporting(self):
        return not self.failed and (_alive(self.conn) or bool(self.agent_path))

    def fail(self, where, exc):
        """Report an internal failure once, then stay quiet."""
        if self.failed:
            return
        try:
            self.send({"type": "error", "where": where, "error": _err(exc)})
        except BaseException:
            pass
        self.failed = True
        self.stop_evt.set()

    # sampling -------------------------------------------------------------

    def _loop(self):
        period = 1.0 / self.cfg.hz
        evt = self.stop_evt
        try:
            while not evt.is_set():
                wait = period
                if self.agent_path and not _alive(self.agent) and time.monotonic() >= self.agent_next:
                    self.dial_agent()
                if _alive(self.conn) or _alive(self.agent):
                    self.report_dist()
                    self.send(self.sample())
                elif self.agent_path:
                    # Nobody to sample for until the next attempt.
                    wait = max(period, self.agent_next - time.monotonic())
                else:
                    return
                if evt.wait(wait):
                    return
        except BaseException as e:
            self.fail("sample", e)

    def sample(self):
        if not _torch_done:
            # Safety net for interpreters whose import system does not
            # signal the end of torch's import the way _TorchSpec expects.
            torch = sys.modules.get("torch")
            spec = getattr(torch, "__spec__", None)
            if torch is not None and getattr(spec, "_initializing", None) is False:
                _on_torch_imported(torch)
        self.seq += 1
        msg = {
            "type": "sample",
            "seq": self.seq,
            "rss_bytes": self.rss(),
            "optimizer_steps": _optimizer_steps,
            "user_steps": _user_steps,
        }
        cuda = self.cuda_stats()
        if cuda:
            msg["cuda"] = cuda
        return msg

    def rss(self):
        # Every syscall releases the GIL, and taking it back from a busy
        # training thread costs that thread a switch: one pread on a kept
        # fd instead of open/read/close.
        try:
            if self.statm is None:
                self.statm = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            return int(os.pread(self.statm, 256, 0).split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            return _rss()

    def cuda_stats(self):
        if not _torch_done:
            return None  # torch absent or still importing: torch.cuda may be half-built
        tc = sys.modules.get("torch.cuda")
        if tc is None or not tc.is_initialized():
            return None
        if not self.cuda_hooked:
            _on_cuda_init()
        if self.ndev is None:
            self.ndev = int(tc.device_count())
        out = []
        for d in range(self.ndev):
            st = tc.memory_stats(d)
            # A device this process never allocated on may have no context;
            # mem_get_info would create one, so it is skipped.
            if not st or not st.get("reserved_bytes.all.peak"):
                continue
            row = {"device": d}
            for name, key in _STAT_KEYS:
                v = st.get(key)
                if v is not None:
                    row[name] = int(v)
            try:
                free, total = tc.mem_get_info(d)
                row["free_bytes"] = int(free)
                row["total_bytes"] = int(total)
            except Exception:
                pass
            out.append(row)
        return out

    # stacks ---------------------------------------------------------------

    def _register_stacks(self):
        import faulthandler

        try:
            if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
                return  # the job (or a notebook) already uses it
            path = self.cfg.file_prefix("stacks", self.pid) + ".txt"
            f = open(path, "a")
            faulthandler.register(STACK_SIGNAL, file=f, all_threads=True, chain=False)
            self.stack_file = f
            self.stack_path = path
        except (OSError, ValueError, RuntimeError):
            pass

    def _close_stacks(self):
        f = self.stack_file
        if f is None:
            return
        self.stack_file = None
        try:
            import faulthandler

            faulthandler.unregister(STACK_SIGNAL)
            empty = os.fstat(f.fileno()).st_size == 0
            f.close()
            if empty:
                os.unlink(self.stack_path)
        except (OSError, ValueError):
            pass


_STAT_KEYS = (
    ("allocated_bytes", "allocated_bytes.all.current"),
    ("allocated_peak_bytes", "allocated_bytes.all.peak"),
    ("reserved_bytes", "reserved_bytes.all.current"),
    ("reserved_peak_bytes", "reserved_bytes.all.peak"),
    ("active_bytes", "active_bytes.all.current"),
    ("active_peak_bytes", "active_bytes.all.peak"),
    ("inactive_split_bytes", "inactive_split_bytes.all.current"),
    ("inactive_split_peak_bytes", "inactive_split_bytes.all.peak"),
    ("requested_bytes", "requested_bytes.all.current"),
    ("requested_peak_bytes", "requested_bytes.all.peak"),
    ("segments", "segment.all.current"),
    ("num_alloc_retries", "num_alloc_retries"),
    ("num_ooms", "num_ooms"),
)


def _alive(conn):
    return conn is not None and not conn.dead


def _same_path(a, b):
    return bool(b) and os.path.normpath(a) == os.path.normpath(b)


def _rss():
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _argv():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        return [os.fsdecode(a) for a in parts[:64]]
    except OSError:
        return list(getattr(sys, "argv", []))[:64]


# A JSON encoder for the probe's own messages (dicts, lists, str, int, float,
# bool, None): importing the json package costs a process more start-up time
# than the probe's whole remaining work.
_ESC = {i: "\\u%04x" % i for i in range(0x20)}
_ESC.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"})


def _dumps(v):
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
        return "{" + ",".join(_dumps(str(k)) + ":" + _dumps(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_dumps(x) for x in v) + "]"
    return _dumps(str(v))


def _err(exc):
    return ("%s: %s" % (type(exc).__name__, exc))[:2000]


# --------------------------------------------------------------------------
# interpreter-wide hooks: import of torch, fork, exit


def _install_interpreter_hooks():
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    if "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchFinder())
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(
            before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child
        )
    atexit.register(_at_exit)
    _install_uncaught_hook()


def _install_uncaught_hook():
    """Report the exception that ends the process (an "exception" line),
    then let the job's own hook print it as it would have."""
    prev = sys.excepthook

    def _vramguard_uncaught(etype, value, tb):
        _report_uncaught(etype, value)
        return prev(etype, value, tb)

    sys.excepthook = _vramguard_uncaught


def _report_uncaught(etype, value):
    """Send the exception that ends this process (an "exception" line)."""
    try:
        p = _p
        if p is None or p.pid != os.getpid() or not p.reporting() or issubclass(etype, KeyboardInterrupt):
            return
        p.report_dist()
        mod = getattr(etype, "__module__", "")
        name = getattr(etype, "__qualname__", getattr(etype, "__name__", "?"))
        if mod not in ("builtins", "__main__", None, ""):
            name = "%s.%s" % (mod, name)
        p.send({"type": "exception", "exc_type": name, "message": str(value)[:2000]})
        p.flush_now()
    except BaseException:
        pass


def _patch_default_pg():
    """Report the rank the moment the default process group is set:
    init_process_group calls distributed_c10d._update_default_pg (torch 1.x
    and 2.x), a one-line setter, so the rank is known even of a process that
    dies before the sampler's next tick. Nothing can raise inside it, so no
    traceback shows the wrapper."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    orig = getattr(c10d, "_update_default_pg", None)
    if orig is None or getattr(orig, "_vramguard", False):
        return

    def _update_default_pg(*args, **kwargs):
        result = orig(*args, **kwargs)
        try:
            p = _p
            if p is not None and p.pid == os.getpid():
                p.report_dist()
        except BaseException:
            pass
        return result

    _update_default_pg._vramguard = True
    _update_default_pg.__wrapped__ = orig
    c10d._update_default_pg = _update_default_pg


def _patch_spawn_report():
    """A child of torch.multiprocessing.spawn catches the exception that ends
    it (spawn.py's _wrap: error_queue.put(traceback.format_exc());
    sys.exit(1)), so sys.excepthook never sees it, and the parent prints only
    the first child's it finds. traceback.format_exc, called from _wrap,
    reports it first; what it returns is unchanged, and no frame of the
    probe is in the traceback it formats."""
    import traceback

    orig = traceback.format_exc
    if getattr(orig, "_vramguard", False):
        return

    def format_exc(limit=None, chain=True):
        try:
            code = sys._getframe(1).f_code
            if code.co_name == "_wrap" and code.co_filename.replace("\\", "/").endswith("torch/multiprocessing/spawn.py"):
                etype, value, _ = sys.exc_info()
                if etype is not None:
                    _report_uncaught(etype, value)
        except BaseException:
            pass
        return orig(limit=limit, chain=chain)

    format_exc._vramguard = True
    format_exc.__wrapped__ = orig
    traceback.format_exc = format_exc


def _dist_view():
    """The process's rank as torch.distributed knows it, once the default
    process group exists; None before (or without torch.distributed)."""
    d = sys.modules.get("torch.distributed")
    if d is None:
        return None
    try:
        if not d.is_available() or not d.is_initialized():
            return None
        rank = int(d.get_rank())
        if rank < 0:
            return None
        msg = {"type": "dist", "rank": rank, "world_size": int(d.get_world_size())}
        try:
            msg["backend"] = str(d.get_backend())
        except Exception:
            pass
        local = os.environ.get("LOCAL_RANK", "").strip()
        if local.isdigit():
            msg["local_rank"] = int(local)
        return msg
    except Exception:
        return None


def _initializing(mod):
    spec = getattr(mod, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class _TorchFinder:
    """Finds nothing itself. When `torch` is imported it marks torch's spec so
    the probe patches torch the moment its import has finished.

    The import system sets spec._initializing = False once exec_module has
    returned (or raised); the marked spec runs the patch there. Nothing of the
    probe sits on the stack while torch executes, so a failing
    `import torch` produces exactly the traceback it would without vramguard.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        from importlib.machinery import ModuleSpec

        spec = None
        for finder in sys.meta_path:
            fs = getattr(finder, "find_spec", None)
            if fs is None:
                continue
            spec = fs(fullname, path, target)
            if spec is not None:
                break
        if spec is not None and type(spec) is ModuleSpec:
            spec.__class__ = _TorchSpec
        return spec

    def invalidate_caches(self):
        pass


def _make_torch_spec():
    from importlib.machinery import ModuleSpec

    class _TorchSpec(ModuleSpec):
        def __setattr__(self, name, value):
            object.__setattr__(self, name, value)
            if name == "_initializing" and value is False:
                object.__setattr__(self, "__class__", ModuleSpec)
                torch = sys.modules.get("torch")
                if torch is not None:
                    _on_torch_imported(torch)

    return _TorchSpec


_TorchSpec = _make_torch_spec()


def _before_fork():
    p = _p
    if p is not None and p.pid == os.getpid():
        # A process with a running sampler is multi-threaded; stopping it for
        # the fork keeps the child free of a half-held lock and keeps Python
        # 3.12+ from warning about fork() in a multi-threaded process.
        try:
            p.stop_thread(0.5)
        except BaseException:
            pass


def _after_fork_parent():
    p = _p
    if p is not None and p.pid == os.getpid():
        try:
            p.start_thread()
        except BaseException:
            pass


def _after_fork_child():
    global _p, _optimizer_steps, _user_steps, _start_lock, _torch_lock
    _start_lock = threading.Lock()
    _torch_lock = threading.Lock()
    old = _p
    if old is None:
        return
    _optimizer_steps = 0
    _user_steps = 0
    _p = None
    try:
        old.abandon()
        old.stack_file = None  # the parent's; faulthandler is re-registered below
        p = _Probe(old.cfg)
        _p = p
        p.begin(forked=True)
    except BaseException:
        pass


def _at_exit():
    p = _p
    if p is None or p.pid != os.getpid():
        return
    try:
        p.close(final=True)
    except BaseException:
        pass


# --------------------------------------------------------------------------
# torch


def _on_torch_imported(torch):
    global _torch_done
    if not _torch_lock.acquire(blocking=False):
        return  # the other path (import hook or sampler) is doing it
    try:
        if _torch_done:
            return
        _torch_done = True
    finally:
        _torch_lock.release()
    p = _p
    if p is None:
        return
    try:
        if p.reporting():
            _patch_spawn_report()
            _patch_default_pg()
            hook = _patch_optimizer()
            p.send({"type": "torch", "version": str(getattr(torch, "__version__", "")), "step_hook": hook})
            _queue_cuda_init(torch)
        if p.reporting() or p.cfg.atomic_save:
            _patch_save(torch)
    except BaseException as e:
        p.fail("torch", e)


def _count_post_hook(optimizer, args, kwargs):
    global _optimizer_steps
    _optimizer_steps += 1


def _patch_optimizer():
    """Count optimizer steps. torch >= 2.0 has a global post-step hook; older
    versions call Optimizer._optimizer_step_code after every step of any
    optimizer class, which is wrapped instead. Either way nothing of the probe
    is on the stack while step() runs."""
    mod = sys.modules.get("torch.optim.optimizer")
    if mod is None:
        return None
    reg = getattr(mod, "register_optimizer_step_post_hook", None)
    if reg is not None:
        reg(_count_post_hook)
        return "post_hook"
    opt = getattr(mod, "Optimizer", None)
    orig = getattr(opt, "__dict__", {}).get("_optimizer_step_code")
    if orig is None:
        return None
    if isinstance(orig, staticmethod):
        fn = orig.__func__

        def _optimizer_step_code():
            global _optimizer_steps
            _optimizer_steps += 1
            return fn()

        opt._optimizer_step_code = staticmethod(_optimizer_step_code)
    else:

        def _optimizer_step_code(self):
            global _optimizer_steps
            _optimizer_steps += 1
            return orig(self)

        opt._optimizer_step_code = _optimizer_step_code
    return "step_code"


def _queue_cuda_init(torch):
    tc = sys.modules.get("torch.cuda")
    lazy = getattr(tc, "_lazy_call", None)
    if lazy is None:
        return  # the sampler installs the CUDA hooks when it first sees CUDA up

    def _vramguard_cuda_init():
        try:
            _on_cuda_init()
        except BaseException:
            pass

    lazy(_vramguard_cuda_init)


def _on_cuda_init():
    """CUDA is up (the job initialised it): attach the OOM observer (or the
    exception-hook fallback) and, with --oom-snapshot, start recording
    allocation history."""
    p = _p
    if p is None or p.cuda_hooked or not p.reporting():
        return
    p.cuda_hooked = True
    torch = sys.modules.get("torch")
    try:
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            attach(_oom_observer)
            p.observer_on = True
        else:
            _install_excepthook()
        if p.cfg.oom_snapshot:
            _enable_history(torch)
            p.history_on = True
    except BaseException as e:
        p.fail("cuda_init", e)


def _enable_history(torch):
    import inspect

    fn = torch.cuda.memory._record_memory_history
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    if "max_entries" in params:  # torch >= 2.1
        fn(enabled="all", context="all", stacks="python", max_entries=SNAPSHOT_MAX_ENTRIES)
    elif "trace_alloc_max_entries" in params:  # torch 2.0
        fn(True, record_context=True, trace_alloc_max_entries=SNAPSHOT_MAX_ENTRIES, trace_alloc_record_context=True)
    else:  # torch 1.x keeps the last allocation of each block, bounded by the heap
        fn(True)


def _oom_observer(device, alloc, device_limit, device_free):
    try:
        _on_oom("observer", device=int(device), alloc=int(alloc), limit=int(device_limit), free=int(device_free))
    except BaseException:
        pass


def _install_excepthook():
    prev = sys.excepthook

    def _vramguard_excepthook(etype, value, tb):
        try:
            if _is_cuda_oom(value):
                p = _p
                if p is not None and not (p.observer_on and p.oom_count):
                    msg = str(value)
                    _on_oom("excepthook", device=_oom_device(msg), alloc=_oom_alloc(msg), message=msg)
        except BaseException:
            pass
        return prev(etype, value, tb)

    sys.excepthook = _vramguard_excepthook


def _is_cuda_oom(exc):
    tc = sys.modules.get("torch.cuda")
    oom_t = getattr(tc, "OutOfMemoryError", None)
    if isinstance(oom_t, type) and isinstance(exc, oom_t):
        return True
    return isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc)


def _oom_device(msg):
    import re

    m = re.search(r"GPU (\d+)", msg)
    return int(m.group(1)) if m else None


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _oom_alloc(msg):
    import re

    m = re.search(r"Tried to allocate ([0-9.]+) ([KMGT]?i?B)", msg)
    if not m or m.group(2) not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _on_oom(source, device=None, alloc=None, limit=None, free=None, message=None):
    p = _p
    if p is None or not p.reporting():
        return
    p.oom_count += 1
    n = p.oom_count
    if n > MAX_OOM_EVENTS:
        return
    ev = {"type": "oom", "source": source, "n": n}
    if device is not None:
        ev["device"] = device
    if alloc is not None:
        ev["alloc_bytes"] = alloc
    if limit is not None:
        ev["limit_bytes"] = limit
    if free is not None:
        ev["free_bytes"] = free
    if message:
        ev["message"] = message[:2000]
    tc = sys.modules.get("torch.cuda")
    if p.cfg.run_dir and n <= MAX_OOM_DUMPS:
        base = "%s-%d" % (p.cfg.file_prefix("oom", p.pid), n)
        try:
            text = tc.memory_summary(device)
            with open(base + ".txt", "w") as f:
                f.write(text)
            ev["summary_path"] = base + ".txt"
        except Exception as e:
            ev["summary_error"] = _err(e)
        if p.history_on:
            try:
                _dump_snapshot(tc, base + ".pickle")
                ev["snapshot_path"] = base + ".pickle"
            except Exception as e:
                ev["snapshot_error"] = _err(e)
    try:
        cuda = p.cuda_stats()
        if cuda:
            ev["cuda"] = cuda
    except Exception:
        pass
    p.send(ev)
    p.flush_now()


def _dump_snapshot(tc, path):
    mem = tc.memory
    tmp = path + ".tmp"
    dump = getattr(mem, "_dump_snapshot", None)
    if dump is not None:
        dump(tmp)
    else:
        import pickle

        snap = mem._snapshot()
        with open(tmp, "wb") as f:
            pickle.dump(snap, f)
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# torch.save: checkpoint events and --atomic-save


def _patch_save(torch):
    ser = sys.modules.get("torch.serialization")
    orig = getattr(ser, "save", None) or torch.save
    if getattr(orig, "_vramguard", False):
        return
    wrapped = _wrap_save(orig)
    wrapped._vramguard = True
    if ser is not None and getattr(ser, "save", None) is orig:
        ser.save = wrapped
    if getattr(torch, "save", None) is orig:
        torch.save = wrapped


def _wrap_save(orig):
    import functools

    @functools.wraps(orig)
    def save(obj, f, *args, **kwargs):
        p = _p
        if p is None:
            return orig(obj, f, *args, **kwargs)
        report = p.reporting()
        atomic = p.cfg.atomic_save
        if not report and not atomic:
            return orig(obj, f, *args, **kwargs)
        path = None
        plan = None
        pos = None
        try:
            path = _path_of(f)
            if path is not None and atomic:
                plan = _AtomicSave.prepare(path, p.pid)
            elif path is None:
                pos = _tell(f)
        except OSError:
            plan = None  # cannot stage next to it: a plain save, which reports its own error
        except BaseException as e:
            p.fail("save", e)
            report = False
            plan = None
        t0 = time.perf_counter()
        try:
            if plan is None:
                result = orig(obj, f, *args, **kwargs)
            else:
                result = plan.run(orig, obj, args, kwargs)
        except BaseException as e:
            if report:
                _ckpt_event(p, f, path, pos, t0, plan, e)
            raise
        if report:
            _ckpt_event(p, f, path, pos, t0, plan, None)
        return result

    return save


def _ckpt_event(p, f, path, pos, t0, plan, exc):
    try:
        secs = time.perf_counter() - t0
        ev = {"type": "ckpt", "seconds": round(secs, 6), "atomic": plan is not None, "ok": exc is None}
        if path is not None:
            real = plan.path if plan is not None else path
            ev["path"] = os.path.abspath(real)
            if exc is None:
                ev["bytes"] = os.stat(real).st_size
        else:
            name = getattr(f, "name", None)
            if isinstance(name, str):
                ev["path"] = os.path.abspath(name)
            end = _tell(f)
            if exc is None and pos is not None and end is not None:
                ev["bytes"] = end - pos
        if exc is not None:
            ev["error"] = _err(exc)
        ev["optimizer_steps"] = _optimizer_steps
        p.send(ev)
    except BaseException as e:
        p.fail("ckpt", e)


def _path_of(f):
    if isinstance(f, str):
        return f
    if isinstance(f, os.PathLike):
        v = os.fspath(f)
        return v if isinstance(v, str) else os.fsdecode(v)
    return None


def _tell(f):
    try:
        return int(f.tell())
    except Exception:
        return None


_cleaned_dirs = set()


class _AtomicSave:
    """torch.save to a path, staged in a fresh directory next to the target
    (so the file keeps its name and torch writes the same bytes), fsynced,
    then renamed over the target. A crash before the rename leaves the
    previous checkpoint untouched."""

    def __init__(self, path, d, tmpdir, tmp, mode):
        self.path = path
        self.dir = d
        self.tmpdir = tmpdir
        self.tmp = tmp
        self.mode = mode

    @classmethod
    def prepare(cls, path, pid):
        real = os.path.realpath(path)  # write through symlinks, as a plain save does
        d = os.path.dirname(real) or "."
        if os.path.isdir(real):
            raise IsADirectoryError(real)
        if d not in _cleaned_dirs:
            _cleaned_dirs.add(d)
            _clean_stale(d)
        tmpdir = os.path.join(d, "%s%d-%s" % (SAVE_TMP_PREFIX, pid, os.urandom(4).hex()))
        os.mkdir(tmpdir, 0o700)
        mode = None
        try:
            import stat

            mode = stat.S_IMODE(os.stat(real).st_mode)
        except OSError:
            pass
        return cls(real, d, tmpdir, os.path.join(tmpdir, os.path.basename(real)), mode)

    def run(self, orig, obj, args, kwargs):
        try:
            result = orig(obj, self.tmp, *args, **kwargs)
            _fsync(self.tmp)
            if self.mode is not None:
                os.chmod(self.tmp, self.mode)
            os.replace(self.tmp, self.path)
            _fsync(self.dir)
            return result
        finally:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            try:
                os.rmdir(self.tmpdir)
            except OSError:
                pass


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clean_stale(d):
    """Remove staging directories left by saves whose process is gone."""
    try:
        entries = [e for e in os.listdir(d) if e.startswith(SAVE_TMP_PREFIX)]
    except OSError:
        return
    for e in entries:
        try:
            pid = int(e[len(SAVE_TMP_PREFIX) :].split("-", 1)[0])
            os.kill(pid, 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError, OSError):
            continue
        import shutil

        shutil.rmtree(os.path.join(d, e), ignore_errors=True)
