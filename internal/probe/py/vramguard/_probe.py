"""The probe of one process: its start and stop, its connections (the
supervisor's socket and the agent's), the sampling thread, and what it does
at fork and exit. The other parts of the probe, each in its own module:

    _config    the configuration, from the environment or start()'s arguments
    _wire      the non-blocking connection and the JSON of the lines
    _state     the running probe, which every part reads
    _steps     optimizer steps and vramguard.step()
    _torch     torch, patched the moment its import has finished
    _dist      the process's rank (a "dist" line)
    _uncaught  the exception that ends the process (an "exception" line)
    _oom       CUDA OOM forensics (an "oom" line, summary, snapshot)
    _save      torch.save: "ckpt" lines and --atomic-save
    _stacks    every thread's stack on STACK_SIGNAL

Rules the probe keeps, whatever happens:

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

from . import _dist, _mem, _state, _steps, _torch, _uncaught
from ._config import Config, clamp_hz, default_socket
from ._steps import step  # noqa: F401 (vramguard.step)
from ._wire import Conn, alive, dumps, err

PROTOCOL = 1
VERSION = "0.1.0"

AGENT_MAX_PENDING = 256 << 10  # bytes buffered for the agent's socket before dropping
AGENT_RETRY_S = 30.0  # between attempts to reach a missing or dead agent
AGENT_FLUSH_S = 0.25  # at most this long at exit for the agent to take the last lines


_start_lock = threading.Lock()
_hooks_installed = False  # import hook, fork hooks, atexit: once per interpreter

# The running probe and the optimizer's step count, read (never set) as
# _probe._p and _probe._optimizer_steps by vramguard.autosave()
# (script_autosave), the benchmarks and tests: each lives in the one module
# that keeps it.
_SHARED = {"_p": (_state, "p"), "_optimizer_steps": (_steps, "optimizer_steps")}


def __getattr__(name):
    where = _SHARED.get(name)
    if where is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(*where)


def event(type, **fields):
    """Send one message of the given type with fields on the probe's
    connections; a no-op when the probe is not running. For the notebook
    side (cells, autosaves), which keeps its own logic in its own modules."""
    try:
        p = _state.p
        if p is not None and p.pid == os.getpid() and p.reporting():
            fields["type"] = type
            p.send(fields)
    except BaseException:
        pass


def start(socket_path=None, hz=None, run_dir=None, oom_snapshot=None, atomic_save=None, run_id=None):
    """Start the probe in this process (idempotent). Arguments default to the
    VRAMGUARD_* environment variables; without a socket there, the machine-wide
    agent's socket under the vramguard state directory is tried."""
    try:
        with _start_lock:
            if _state.p is not None:
                return
            cfg = Config.from_env(os.environ)
            if socket_path is not None:
                cfg.socket_path = os.fspath(socket_path)
            elif not cfg.socket_path:
                cfg.socket_path = default_socket(os.environ)
            if hz is not None:
                cfg.hz = clamp_hz(hz)
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
    try:
        cfg = Config.from_env(os.environ)
        if not cfg.socket_path and not cfg.agent_path and not cfg.atomic_save and not cfg.run_dir:
            return
        with _start_lock:
            if _state.p is None:
                _begin(cfg, forked=False)
    except BaseException:
        pass


def stop():
    """Stop sampling and close the connection; torch hooks stay but idle."""
    try:
        with _start_lock:
            p, _state.p = _state.p, None
        if p is not None:
            p.close(final=True)
    except BaseException:
        pass


# --------------------------------------------------------------------------
# the probe of one process


def _begin(cfg, forked):
    _install_interpreter_hooks()
    p = _Probe(cfg)
    _state.p = p
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
        self.statm = _mem.Statm()  # kept open: one pread per sample
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
            self.conn = Conn.open(cfg.socket_path)
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
        if torch is not None and not _torch.initializing(torch):
            _torch.on_torch_imported(torch)
        self.start_thread()

    def start_thread(self):
        if self.failed or not (alive(self.conn) or self.agent_path):
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
        if alive(conn) or alive(agent):
            if final and not self.failed:
                try:
                    self.report_dist()
                    self.send(self.sample())
                except BaseException:
                    pass
                self.send({"type": "bye"})
        if alive(conn):
            conn.flush(1.0)
            conn.close()
        if alive(agent):
            agent.flush(AGENT_FLUSH_S)
            agent.close()
        self._close_stacks()
        self.statm.close()

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
        self.statm.close()  # the parent's /proc/<pid>/statm

    # sending --------------------------------------------------------------

    def send(self, msg):
        """Send msg on every open connection. A sample carries the count of
        messages that connection has dropped."""
        conn, agent = self.conn, self.agent
        if not alive(conn) and not alive(agent):
            return
        msg["v"] = PROTOCOL
        msg["pid"] = self.pid
        msg["ts"] = time.time()
        body = dumps(msg)
        line = None
        sample = msg.get("type") == "sample"
        for c in (conn, agent):
            if not alive(c):
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
        c = Conn.open(self.agent_path, timeout=0, limit=AGENT_MAX_PENDING)
        if c is None:
            return
        msg = self._hello()
        msg["v"] = PROTOCOL
        msg["pid"] = self.pid
        msg["ts"] = time.time()
        c.send((dumps(msg) + "\n").encode("utf-8", "surrogateescape"))
        old, self.agent = self.agent, c
        if old is not None:
            old.close()

    def flush_now(self):
        """The process may be about to die: give the supervisor's reader a
        second to take what is buffered, the agent's none."""
        if alive(self.conn):
            self.conn.flush(1.0)
        if alive(self.agent):
            self.agent.flush(0)

    def report_dist(self):
        """Send the process's rank once torch.distributed's process group
        exists (a "dist" line, once)."""
        if self.dist_sent or self.forked or not _torch.done:
            return
        msg = _dist.view()
        if msg is not None:
            self.dist_sent = True
            self.send(msg)

    def reporting(self):
        return not self.failed and (alive(self.conn) or bool(self.agent_path))

    def fail(self, where, exc):
        """Report an internal failure once, then stay quiet."""
        if self.failed:
            return
        try:
            self.send({"type": "error", "where": where, "error": err(exc)})
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
                if self.agent_path and not alive(self.agent) and time.monotonic() >= self.agent_next:
                    self.dial_agent()
                if alive(self.conn) or alive(self.agent):
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
        if not _torch.done:
            # Safety net for interpreters whose import system does not
            # signal the end of torch's import the way _TorchSpec expects.
            torch = sys.modules.get("torch")
            spec = getattr(torch, "__spec__", None)
            if torch is not None and getattr(spec, "_initializing", None) is False:
                _torch.on_torch_imported(torch)
        self.seq += 1
        msg = {
            "type": "sample",
            "seq": self.seq,
            "rss_bytes": self.rss(),
            "optimizer_steps": _steps.optimizer_steps,
            "user_steps": _steps.user_steps,
        }
        cuda = self.cuda_stats()
        if cuda:
            msg["cuda"] = cuda
        return msg

    def rss(self):
        try:
            return self.statm.rss()
        except (OSError, ValueError, IndexError):
            return _rss()

    def cuda_stats(self):
        if not _torch.done:
            return None  # torch absent or still importing: torch.cuda may be half-built
        tc = sys.modules.get("torch.cuda")
        if tc is None or not tc.is_initialized():
            return None
        if not self.cuda_hooked:
            from . import _oom

            _oom.on_cuda_init()
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
        from . import _stacks

        self.stack_file, self.stack_path = _stacks.register(self.cfg, self.pid)

    def _close_stacks(self):
        f = self.stack_file
        if f is None:
            return
        self.stack_file = None
        from . import _stacks

        _stacks.close(f, self.stack_path)


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


def _same_path(a, b):
    return bool(b) and os.path.normpath(a) == os.path.normpath(b)


def _rss():
    try:
        return _mem.rss()
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


# --------------------------------------------------------------------------
# interpreter-wide hooks: import of torch, fork, exit, the exception that ends it


def _install_interpreter_hooks():
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    _torch.install_finder()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(
            before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child
        )
    atexit.register(_at_exit)
    _uncaught.install()


def _before_fork():
    p = _state.p
    if p is not None and p.pid == os.getpid():
        # A process with a running sampler is multi-threaded; stopping it for
        # the fork keeps the child free of a half-held lock and keeps Python
        # 3.12+ from warning about fork() in a multi-threaded process.
        try:
            p.stop_thread(0.5)
        except BaseException:
            pass


def _after_fork_parent():
    p = _state.p
    if p is not None and p.pid == os.getpid():
        try:
            p.start_thread()
        except BaseException:
            pass


def _after_fork_child():
    global _start_lock
    _start_lock = threading.Lock()
    _torch.after_fork_child()
    old = _state.p
    if old is None:
        return
    _steps.reset()
    _state.p = None
    try:
        old.abandon()
        old.stack_file = None  # the parent's; faulthandler is re-registered below
        p = _Probe(old.cfg)
        _state.p = p
        p.begin(forked=True)
    except BaseException:
        pass


def _at_exit():
    p = _state.p
    if p is None or p.pid != os.getpid():
        return
    try:
        p.close(final=True)
    except BaseException:
        pass
