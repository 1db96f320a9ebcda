"""`%vramguard who`: which of the notebook's names holds each live tensor.

A breadth-first walk from what a user can name, in this order, so a tensor
is attributed to the first of them that reaches it: the notebook's own
variables, the output cache (Out[n], _n, _, __, ___ and the last cell's
result), then every place IPython keeps the last exception (sys.last_value,
sys.last_traceback, sys.last_exc, the shell's traceback object, the last
execution result), where each frame's locals are named after the function
and cell (vramguard.roots). The walk (vramguard._scan) descends into what
holds tensors, and the path of each is named afterwards
(vramguard._paths). gc's list of objects gives the tensors no name
reaches.

The scan runs only when asked, pauses the cyclic collector while it runs,
and returns plain figures: no reference to any tensor outlives it.
"""

import gc
import sys
import time
from itertools import compress
from operator import itemgetter, not_

from . import _cuda, peek
from ._paths import attr_path
from ._scan import Scan
from .roots import cell_of, exception_roots, output_roots, shell_name

def scan(shell, unreachable=True):
    """The report `%vramguard who` prints: plain data only."""
    t0 = time.perf_counter()
    torch = sys.modules.get("torch")
    rep = {"groups": [], "cuda": [], "objects": 0}
    if torch is None or not hasattr(torch, "Tensor"):
        rep["seconds"] = time.perf_counter() - t0
        return rep
    collecting = gc.isenabled()
    gc.disable()  # the walk's own lists would set off full collections
    try:
        # torch's C getters call a tensor subclass's __torch_function__
        # unless it is switched off
        with torch._C.DisableTorchFunction():
            storages, objects = _walk(shell, torch, unreachable)
    finally:
        if collecting:
            gc.enable()
    _cells_from_allocator(shell, storages)
    groups, named = {}, {}
    for r in storages:
        grp = r.pop("group")
        del r["data_ptr"]
        g = groups.get(grp)
        if g is None:
            g = groups[grp] = {"holder": grp, "bytes": 0, "tensors": []}
        g["tensors"].append(r)
    for grp, g in groups.items():
        ts = g["tensors"]
        ts.sort(key=_BYTES, reverse=True)  # (stable: the walk's order among equals)
        g["bytes"] = sum(map(_BYTES, ts))
        if grp != "(no name)" and grp != STOPPED:
            for r in ts:
                named[r["device"]] = named.get(r["device"], 0) + r["bytes"]
    rep["groups"] = sorted(groups.values(), key=lambda g: -g["bytes"])
    rep["objects"] = objects
    for d, (alloc, res) in sorted(_cuda.totals().items()):
        dev = "cuda:%d" % d
        n = named.get(dev, 0)
        rep["cuda"].append({"device": dev, "allocated_bytes": alloc, "named_bytes": n,
                            "unnamed_bytes": max(alloc - n, 0), "reserved_bytes": res,
                            "cache_bytes": max(res - alloc, 0)})
    rep["cpu_named_bytes"] = named.get("cpu", 0)
    rep["seconds"] = time.perf_counter() - t0
    return rep


NO_NAME = "<no name reaches it>"
STOPPED = "(no name, or deeper than the walk goes)"
_BYTES = itemgetter("bytes")


def _subclasses(cls):
    """ids of cls and its subclasses (by id: a subclass's metaclass may
    define __hash__)."""
    out, todo = {id(cls)}, [cls]
    while todo:
        for c in type.__subclasses__(todo.pop()):
            if id(c) not in out:
                out.add(id(c))
                todo.append(c)
    return out


def _walk(shell, torch, unreachable):
    """(storage records in the order found, objects walked)."""
    T = torch.Tensor
    # Every live tensor gc tracks, and their exact types, found in C.
    ttypes = frozenset(_subclasses(T))
    objs = gc.get_objects()
    live = list(compress(objs, map(ttypes.__contains__, map(id, map(type, objs)))))
    del objs
    if not live:
        return [], 0
    s = Scan(shell, torch, ttypes)
    hidden = getattr(shell, "user_ns_hidden", {}) or {}
    names = [(v, k, k) for k, v in list(shell.user_ns.items())
             if type(k) is str and not shell_name(k, hidden)]
    if s.Module is not None:
        # Parameters by the name a user types (model.layer.weight), for
        # optimizer state keyed by them, whichever the walk reaches first.
        for v, k, _ in names:
            if issubclass(type(v), s.Module):
                _parameter_paths(v, k, s.Module, s.tensor_path)
    s.walk(names)
    # The output cache and the last exception are grouped under one root
    # each, so the table says "Out[3]" or "last exception" as a user would.
    s.walk(output_roots(shell))
    s.walk([(v, p, "last exception") for v, p in exception_roots(shell)])
    s.record()
    if unreachable:
        # Tensors alive that no name reaches: in a reference cycle waiting
        # for gc, a library's global, a C extension's hold; or, where a walk
        # stopped at MAX_DEPTH, perhaps below where it stopped.
        reached = set(map(id, map(itemgetter(0), s.found)))
        reached.update(map(id, map(itemgetter(0), s.also)))
        if s.stopped:
            path, group = "<no name within %d steps of a name: the walk stopped there>" % s.stopped, STOPPED
        else:
            path, group = NO_NAME, "(no name)"
        rest = list(compress(live, map(not_, map(reached.__contains__, map(id, live)))))
        for t, info in zip(rest, s.read(rest)):
            s.storage(t, info, path, group)
    return list(s.storages.values()), s.objects


def _parameter_paths(module, path, Module, out, seen=None):
    """id(parameter) -> path (model[0].weight) under module, read from the
    modules' own _parameters and _modules dicts (never named_parameters(),
    which a subclass may override)."""
    seen = set() if seen is None else seen
    todo = [(module, path)]
    while todo:
        m, p = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        d = peek.instance_dict(m) or {}
        for n, prm in peek.dict_items(d.get("_parameters")):
            if prm is not None and type(n) is str:
                out.setdefault(id(prm), attr_path(p, n))
        for n, sub in reversed(peek.dict_items(d.get("_modules"))):
            if type(n) is str and issubclass(type(sub), Module):
                todo.append((sub, attr_path(p, n)))


def _cells_from_allocator(shell, storages):
    """The cell that allocated each CUDA storage, where the allocator
    recorded stacks (torch.cuda.memory._record_memory_history)."""
    tc = _cuda.cuda()
    if tc is None or not any(r["device"].startswith("cuda") for r in storages):
        return
    try:
        snap = tc.memory._snapshot()
    except Exception:
        return
    where = {}
    for seg in snap.get("segments", ()):
        for b in seg.get("blocks", ()):
            frames = b.get("frames")
            if frames is None:
                hist = b.get("history") or ()
                frames = hist[-1].get("frames") if hist else None
            if not frames:
                continue
            for fr in frames:
                c = cell_of(shell, fr.get("filename", ""))
                if c:
                    where[b.get("address")] = "%s:%d" % (c, fr.get("line", 0))
                    break
    for r in storages:
        c = where.get(r.get("data_ptr"))
        if c:
            r["cell"] = c
