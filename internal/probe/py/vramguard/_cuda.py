"""CUDA figures for the notebook side, read without importing torch and
without initialising CUDA: torch.cuda is used only when the notebook itself
imported torch and initialised CUDA.

Per-cell peaks come from the caching allocator's own counters:
reset_peak_memory_stats() at the start of a cell, the peak read at its end.
torch has no setter for a peak, so the value a reset would erase is kept
here ("carried") and torch.cuda.memory_stats is wrapped to report
max(carried, current) for every ".peak" key. max_memory_allocated(),
max_memory_reserved() and memory_summary() read through memory_stats, so a
notebook's own readings are the ones it would have had without vramguard; a
reset_peak_memory_stats() of its own clears what was carried, as it would
clear the peak.
"""

import sys

PEAK = ".peak"
ALLOCATED = "allocated_bytes.all.current"
ALLOCATED_PEAK = "allocated_bytes.all.peak"
RESERVED = "reserved_bytes.all.current"
RESERVED_PEAK = "reserved_bytes.all.peak"


def cuda():
    """torch.cuda when torch is fully imported and CUDA initialised, else None."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    tc = sys.modules.get("torch.cuda")
    try:
        if tc is None or not tc.is_initialized():
            return None
    except Exception:
        return None
    return tc


def _index(tc, device):
    if device is None:
        return int(tc.current_device())
    if isinstance(device, int):
        return device
    idx = getattr(device, "index", None)
    if idx is not None:
        return int(idx)
    if isinstance(device, str) and ":" in device:
        return int(device.rsplit(":", 1)[1])
    return int(tc.current_device())


class Peaks:
    """The allocator's counters per device, with per-cell peaks that leave
    the notebook's own peak readings intact (see the module comment)."""

    def __init__(self):
        self.tc = None
        self.raw_stats = None
        self.raw_reset = None
        self.wrapped_stats = None
        self.wrapped_reset = None
        self.carried = {}  # device -> {".peak" key: value erased by our reset}

    def attached(self):
        return self.tc is not None

    def attach(self, tc):
        if self.tc is not None:
            return
        mem = tc.memory
        raw_stats = mem.memory_stats
        raw_reset = mem.reset_peak_memory_stats
        carried = self.carried

        def memory_stats(device=None):
            st = raw_stats(device)
            try:
                c = carried.get(_index(tc, device))
                if c:
                    for k, v in c.items():
                        if st.get(k, 0) < v:
                            st[k] = v
            except Exception:
                pass
            return st

        def reset_peak_memory_stats(device=None):
            try:
                carried.pop(_index(tc, device), None)
            except Exception:
                pass
            return raw_reset(device)

        for f, raw in ((memory_stats, raw_stats), (reset_peak_memory_stats, raw_reset)):
            f.__wrapped__ = raw
            f.__doc__ = raw.__doc__
            f._vramguard = True
        self.tc, self.raw_stats, self.raw_reset = tc, raw_stats, raw_reset
        self.wrapped_stats, self.wrapped_reset = memory_stats, reset_peak_memory_stats
        for mod in (mem, tc):
            if getattr(mod, "memory_stats", None) is raw_stats:
                mod.memory_stats = memory_stats
            if getattr(mod, "reset_peak_memory_stats", None) is raw_reset:
                mod.reset_peak_memory_stats = reset_peak_memory_stats

    def detach(self):
        """Put torch's functions back (where nobody replaced ours since)."""
        tc = self.tc
        if tc is None:
            return
        for mod in (tc.memory, tc):
            if getattr(mod, "memory_stats", None) is self.wrapped_stats:
                mod.memory_stats = self.raw_stats
            if getattr(mod, "reset_peak_memory_stats", None) is self.wrapped_reset:
                mod.reset_peak_memory_stats = self.raw_reset
        self.tc = None

    def devices(self):
        """Devices this process allocated on: one never used may have no
        context, and nothing here may create one."""
        out = []
        for d in range(int(self.tc.device_count())):
            st = self.raw_stats(d)
            if st and (st.get(RESERVED_PEAK) or self.carried.get(d)):
                out.append((d, st))
        return out

    def begin(self):
        """At a cell's start: {device: (allocated, reserved)}, and each
        device's peak reset to its current value, the old peak carried."""
        out = {}
        for d, st in self.devices():
            c = self.carried.setdefault(d, {})
            for k, v in st.items():
                if k.endswith(PEAK) and v > c.get(k, 0):
                    c[k] = v
            self.raw_reset(d)
            out[d] = (int(st.get(ALLOCATED, 0)), int(st.get(RESERVED, 0)))
        return out

    def end(self, start):
        """At a cell's end: the "cuda" rows of a cell message."""
        rows = []
        for d, st in self.devices():
            a0, r0 = start.get(d, (0, 0))
            a, r = int(st.get(ALLOCATED, 0)), int(st.get(RESERVED, 0))
            rows.append({
                "device": d,
                "allocated_bytes": a,
                "allocated_delta": a - a0,
                "allocated_peak_delta": max(int(st.get(ALLOCATED_PEAK, 0)) - a0, 0),
                "reserved_bytes": r,
                "reserved_delta": r - r0,
                "reserved_peak_delta": max(int(st.get(RESERVED_PEAK, 0)) - r0, 0),
            })
        return rows

    def totals(self):
        """{device: (allocated, reserved)} now, from the raw counters."""
        return {d: (int(st.get(ALLOCATED, 0)), int(st.get(RESERVED, 0))) for d, st in self.devices()}


def totals():
    """{device: (allocated, reserved)} for devices in use; {} without CUDA."""
    tc = cuda()
    if tc is None:
        return {}
    stats = getattr(tc.memory.memory_stats, "__wrapped__", tc.memory.memory_stats)
    out = {}
    for d in range(int(tc.device_count())):
        st = stats(d)
        if st and st.get(RESERVED_PEAK):
            out[d] = (int(st.get(ALLOCATED, 0)), int(st.get(RESERVED, 0)))
    return out
