"""A scripted CUDA caching allocator on top of the real (CPU-only) torch, for
the notebook side's tests: a test allocates and frees bytes by hand and the
fake keeps the counters as the real allocator does (current, peak, reserved
rounded up to 2 MiB segments, a cache that empty_cache() returns).

true_peak() is the allocator's peak as the notebook would read it with no
resets at all: the measure the tests hold the restored peaks against.

tensor(nbytes) makes a tensor that reports device cuda:0 and is counted as
allocated while it lives; the stack the allocator would record for it is
its caller's frame, as _record_memory_history would keep it.
"""

import sys
import weakref

import torch
import torch.cuda
import torch.cuda.memory

SEGMENT = 2 << 20

_s = None


class _State:
    def __init__(self):
        self.allocated = 0
        self.allocated_peak = 0
        self.reserved = 0
        self.reserved_peak = 0
        self.true_allocated_peak = 0
        self.true_reserved_peak = 0
        self.blocks = {}  # address -> (size, [frames])
        self.resets = 0
        self.empty_caches = 0
        self.total = 80 << 30


def install():
    global _s
    _s = _State()
    tc, mem = torch.cuda, torch.cuda.memory
    for mod in (tc, mem):
        mod.is_initialized = lambda: True
        mod.memory_stats = memory_stats
        mod.reset_peak_memory_stats = reset_peak_memory_stats
        mod.empty_cache = empty_cache
        mod.mem_get_info = mem_get_info
        mod.memory_summary = lambda device=None, abbreviated=False: "scripted allocator\n"
        mod.current_device = lambda: 0
    tc.device_count = lambda: 1
    mem._snapshot = _snapshot
    if hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
        delattr(torch._C, "_cuda_attach_out_of_memory_observer")
    # %vramguard who reads a tensor's device from torch's C base class, not
    # through the class's own property: it is told of this fake's device.
    try:
        from vramguard import peek
    except ImportError:
        return
    init = peek.Tensors.__init__

    def tensors_init(self, torch_mod):
        init(self, torch_mod)
        c_device = self.device
        self.device = lambda t: torch.device("cuda", 0) if type(t) is FakeCudaTensor else c_device(t)

    peek.Tensors.__init__ = tensors_init


def alloc(n):
    s = _s
    s.allocated += n
    s.allocated_peak = max(s.allocated_peak, s.allocated)
    s.true_allocated_peak = max(s.true_allocated_peak, s.allocated)
    if s.allocated > s.reserved:
        s.reserved = -(-s.allocated // SEGMENT) * SEGMENT
        s.reserved_peak = max(s.reserved_peak, s.reserved)
        s.true_reserved_peak = max(s.true_reserved_peak, s.reserved)


def free(n):
    _s.allocated -= n  # the segment stays reserved: the cache


def true_peak():
    return _s.true_allocated_peak


def counters():
    s = _s
    return {"allocated": s.allocated, "reserved": s.reserved, "resets": s.resets, "empty_caches": s.empty_caches}


class FakeCudaTensor(torch.Tensor):
    @property
    def device(self):
        return torch.device("cuda", 0)

    def __repr__(self):
        return "FakeCudaTensor(%d bytes on cuda:0)" % (self.element_size() * self.nelement())


def tensor(nbytes):
    t = torch.Tensor._make_subclass(FakeCudaTensor, torch.empty(nbytes, dtype=torch.uint8))
    alloc(nbytes)
    f = sys._getframe(1)
    addr = t.data_ptr()
    _s.blocks[addr] = (nbytes, [{"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name}])

    def gone(addr=addr, nbytes=nbytes):
        free(nbytes)
        _s.blocks.pop(addr, None)

    weakref.finalize(t, gone)
    return t


def memory_stats(device=None):
    s = _s
    return {
        "allocated_bytes.all.current": s.allocated,
        "allocated_bytes.all.peak": s.allocated_peak,
        "reserved_bytes.all.current": s.reserved,
        "reserved_bytes.all.peak": s.reserved_peak,
        "active_bytes.all.current": s.allocated,
        "active_bytes.all.peak": s.allocated_peak,
        "num_ooms": 0,
    }


def reset_peak_memory_stats(device=None):
    s = _s
    s.resets += 1
    s.allocated_peak = s.allocated
    s.reserved_peak = s.reserved


def empty_cache():
    s = _s
    s.empty_caches += 1
    s.reserved = -(-s.allocated // SEGMENT) * SEGMENT


def mem_get_info(device=None):
    return (_s.total - _s.reserved, _s.total)


def _snapshot(device=None):
    blocks = [{"address": a, "size": n, "state": "active_allocated", "frames": fr} for a, (n, fr) in _s.blocks.items()]
    return {"segments": [{"device": 0, "blocks": blocks}], "device_traces": []}
