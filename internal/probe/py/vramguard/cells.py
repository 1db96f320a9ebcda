"""The per-cell tracker: what each cell of a notebook did to memory.

At pre_run_cell it notes the kernel's RSS and each CUDA device's allocated
and reserved bytes (resetting the peaks, see _cuda.Peaks) and sends a
"cell_start" message; at post_run_cell it sends a "cell" message for every
cell, keeps the record for `%vramguard cells`, and writes one line to the
cell's stderr when the cell moved a figure by more than the threshold or
raised. Nothing here imports torch.
"""

import collections
import os
import sys
import threading
import time

from . import _cuda, _mem, _probe
from ._units import signed, size

DEFAULT_THRESHOLD = 64 << 20
MAX_CELLS = 10000  # records kept for `%vramguard cells`
FIRST_LINE_MAX = 200
SAMPLER_PERIOD_S = 0.005


def first_line(src):
    """The cell's first non-empty line, at most FIRST_LINE_MAX characters."""
    start, n = 0, len(src)
    while start < n:
        end = src.find("\n", start)
        if end < 0:
            end = n
        line = src[start:end].strip()
        if line:
            return line[:FIRST_LINE_MAX]
        start = end + 1
    return ""


class Host:
    """The kernel's RSS and its peak over a cell. The peak is exact where
    the kernel lets a process reset its high-water mark (writing 5 to
    /proc/self/clear_refs, then VmHWM); elsewhere a thread samples RSS every
    SAMPLER_PERIOD_S while the cell runs."""

    def __init__(self, mode=None):
        self.statm = _mem.Statm()
        self.clear = None
        self.status = None
        self.mode = mode  # "hwm" or "sampler"; None: decided at the first cell
        self.sampler = None
        self.stop = None
        self.max = 0

    def rss(self):
        try:
            return self.statm.rss()
        except (OSError, ValueError, IndexError):
            return 0

    def _reset_hwm(self):
        try:
            if self.clear is None:
                self.clear = os.open("/proc/self/clear_refs", os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            os.write(self.clear, b"5")
            return True
        except OSError:
            return False

    def begin(self):
        if self.mode is None:
            self.mode = "hwm" if self._reset_hwm() and _hwm() else "sampler"
        elif self.mode == "hwm" and not self._reset_hwm():
            self.mode = "sampler"
        rss = self.rss()
        if self.mode == "sampler":
            self.max = rss
            self.stop = threading.Event()
            t = threading.Thread(target=self._sample, args=(self.stop,), name="vramguard-cell-rss", daemon=True)
            self.sampler = t
            t.start()
        return rss

    def _sample(self, stop):
        while not stop.wait(SAMPLER_PERIOD_S):
            r = self.rss()
            if r > self.max:
                self.max = r

    def end(self):
        """(RSS now, peak RSS since begin)."""
        rss = self.rss()
        if self.mode == "sampler":
            if self.stop is not None:
                self.stop.set()
                self.sampler.join(1.0)
                self.stop = self.sampler = None
            return rss, max(self.max, rss)
        return rss, max(self._hwm(), rss)

    def _hwm(self):
        # One pread on a kept fd: each syscall gives up the GIL, and taking
        # it back from busy threads is most of a cell's cost.
        try:
            if self.status is None:
                self.status = os.open("/proc/self/status", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            b = os.pread(self.status, 8192, 0)
            i = b.find(b"VmHWM:")
            if i >= 0:
                return int(b[i + 6 : b.index(b"kB", i)]) * 1024
        except (OSError, ValueError):
            pass
        return _hwm()

    def close(self):
        if self.stop is not None:
            self.stop.set()
        self.statm.close()
        for fd in (self.clear, self.status):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.clear = self.status = None


def _hwm():
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Tracker:
    def __init__(self, shell, host=None, clock=time.perf_counter, wall=time.time, out=None):
        self.shell = shell
        self.host = host or Host()
        self.peaks = _cuda.Peaks()
        self.clock = clock
        self.wall = wall
        self.out = out  # a stream; None: sys.stderr at the time of writing
        self.threshold = DEFAULT_THRESHOLD
        self.mode = "default"  # "quiet", "verbose"
        self.cells = collections.deque(maxlen=MAX_CELLS)
        self.cur = None
        self.listeners = []  # called with each finished record (autosave)

    # IPython's events ----------------------------------------------------

    def pre_run_cell(self, info=None):
        try:
            if info is not None and getattr(info, "silent", False):
                return
            n = int(getattr(self.shell, "execution_count", 0) or 0)
            first = first_line(getattr(info, "raw_cell", "") or "")
            gpu = {}
            tc = _cuda.cuda()
            if tc is not None:
                self.peaks.attach(tc)
                gpu = self.peaks.begin()
            rss = self.host.begin()
            self.cur = (n, first, self.wall(), self.clock(), rss, gpu)
            _probe.event("cell_start", execution_count=n, first_line=first, rss_bytes=rss)
        except Exception:
            self.cur = None

    def post_run_cell(self, result=None):
        cur, self.cur = self.cur, None
        if cur is None:
            return
        try:
            n, first, started, t0, rss0, gpu0 = cur
            secs = self.clock() - t0
            rss, hwm = self.host.end()
            rec = {
                "execution_count": n,
                "first_line": first,
                "started": started,
                "seconds": secs,
                "rss_bytes": rss,
                "rss_delta": rss - rss0,
                "rss_peak_delta": max(hwm - rss0, 0),
            }
            exc = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
            if exc is not None:
                rec["error"] = type(exc).__name__
            tc = _cuda.cuda()
            if tc is not None:
                self.peaks.attach(tc)  # CUDA may have come up during this cell: it started from zero
                rec["cuda"] = self.peaks.end(gpu0)
            self.cells.append(rec)
            msg = {k: v for k, v in rec.items() if k != "started"}
            if "cuda" in msg:
                msg["cuda"] = [
                    {k: r[k] for k in ("device", "allocated_delta", "allocated_peak_delta", "reserved_bytes", "reserved_delta")}
                    for r in rec["cuda"]
                ]
            _probe.event("cell", **msg)
            if self.should_print(rec):
                try:
                    sys.stdout.flush()  # the cell's own output first
                except Exception:
                    pass
                out = self.out or sys.stderr
                out.write(line(rec) + "\n")
                out.flush()
        except Exception:
            return
        for fn in list(self.listeners):
            try:
                fn(rec)
            except Exception:
                pass

    def should_print(self, rec):
        if self.mode == "quiet":
            return False
        if rec.get("error") == "UsageError":
            return False  # a magic's own complaint about its arguments, already one line
        if self.mode == "verbose" or "error" in rec:
            return True
        th = self.threshold
        figures = [rec["rss_delta"], rec["rss_peak_delta"]]
        for r in rec.get("cuda", ()):
            figures += [r["allocated_delta"], r["allocated_peak_delta"], r["reserved_delta"]]
        return any(abs(v) > th for v in figures)

    def close(self):
        self.peaks.detach()
        self.host.close()


def line(rec):
    """vramguard: In[7] +1.2 GiB allocated (peak +3.4 GiB), reserved 9.1 GiB; host +210 MiB (peak +840 MiB); 12.3 s"""
    parts = []
    rows = rec.get("cuda", ())
    for r in rows:
        dev = "cuda:%d " % r["device"] if len(rows) > 1 else ""
        parts.append("%s%s allocated (peak %s), reserved %s" % (
            dev, signed(r["allocated_delta"]), signed(r["allocated_peak_delta"]), size(r["reserved_bytes"])))
    parts.append("host %s (peak %s)" % (signed(rec["rss_delta"]), signed(rec["rss_peak_delta"])))
    parts.append(duration(rec["seconds"]))
    if "error" in rec:
        parts.append("raised " + rec["error"])
    return "vramguard: In[%d] %s" % (rec["execution_count"], "; ".join(parts))


def duration(s):
    if s < 1:
        return "%d ms" % round(s * 1000)
    if s < 600:
        return "%.1f s" % s
    return "%dm%02ds" % divmod(int(s), 60)


def growth(rec):
    """How much a cell grew memory, for sorting: GPU allocated plus host."""
    return sum(r["allocated_delta"] for r in rec.get("cuda", ())) + rec["rss_delta"]
