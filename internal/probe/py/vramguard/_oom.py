"""CUDA OOM forensics. When the job initialises CUDA, torch's OOM observer
is attached (where torch has none, a sys.excepthook that recognises a CUDA
OOM), and with --oom-snapshot the allocator starts recording its history.
At an OOM the probe sends an "oom" line and writes, in the run directory,
the allocator's memory_summary and, when recording, its memory snapshot
(RUN_DIR/oom-[<attempt>-]<pid>-<n>.{txt,pickle}), then gives the
supervisor a second to read the line before the process may die.
"""

import os
import sys

from . import _state, _wire

SNAPSHOT_MAX_ENTRIES = 100000
MAX_OOM_DUMPS = 3  # summary/snapshot files per process
MAX_OOM_EVENTS = 100  # "oom" lines per process


def queue_cuda_init(torch):
    tc = sys.modules.get("torch.cuda")
    lazy = getattr(tc, "_lazy_call", None)
    if lazy is None:
        return  # the sampler installs the CUDA hooks when it first sees CUDA up

    def _vramguard_cuda_init():
        try:
            on_cuda_init()
        except BaseException:
            pass

    lazy(_vramguard_cuda_init)


def on_cuda_init():
    """CUDA is up (the job initialised it): attach the OOM observer (or the
    exception-hook fallback) and, with --oom-snapshot, start recording
    allocation history."""
    p = _state.p
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
                p = _state.p
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
    p = _state.p
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
            ev["summary_error"] = _wire.err(e)
        if p.history_on:
            try:
                _dump_snapshot(tc, base + ".pickle")
                ev["snapshot_path"] = base + ".pickle"
            except Exception as e:
                ev["snapshot_error"] = _wire.err(e)
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
