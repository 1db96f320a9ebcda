"""`%vramguard free`: release what the notebook itself pins.

Never a variable the user named: only the output cache, the last exception
in every place IPython keeps it, then gc.collect() and empty_cache(). Each
step reports what it freed: CUDA allocated and reserved bytes from the
allocator's counters, host from the kernel's RSS.
"""

import gc
import sys
import types

from . import _cuda, _mem
from .roots import exception_roots, output_name


def _measure():
    alloc = res = 0
    for a, r in _cuda.totals().values():
        alloc += a
        res += r
    return alloc, res, _rss()


def _rss():
    try:
        return _mem.rss()
    except (OSError, ValueError, IndexError):
        return 0


def drop_outputs(shell):
    """Out, _N, _, __, ___, the display hook's own references and the last
    cell's result. Returns how many entries were dropped."""
    ns = shell.user_ns
    n = 0
    oh = ns.get("_oh")
    if isinstance(oh, dict):
        for k, v in list(oh.items()):
            key = "_%d" % k if isinstance(k, int) else None
            if key and ns.get(key) is v:
                del ns[key]
            n += 1
        oh.clear()
    dh = getattr(shell, "displayhook", None)
    for name in ("_", "__", "___"):
        old = getattr(dh, name, None)
        if old is not None and not (type(old) is str and old == ""):
            if ns.get(name) is old:
                ns[name] = ""
            setattr(dh, name, "")
    # The display hook pushes _N, _, __ and ___ with interactive=False,
    # which also keeps them in user_ns_hidden: a second reference that
    # IPython's own `%reset out` leaves behind.
    hidden = getattr(shell, "user_ns_hidden", None)
    if isinstance(hidden, dict):
        for k in [k for k in hidden if output_name(k)]:
            if type(hidden[k]) is str and hidden[k] == "":
                continue
            if k in ("_", "__", "___"):
                hidden[k] = ""
            else:
                del hidden[k]
    r = getattr(shell, "last_execution_result", None)
    if getattr(r, "result", None) is not None:
        r.result = None
    return n


def drop_exception(shell):
    """The last exception wherever IPython keeps it, each traceback's frames
    cleared first so their locals go even if something else kept the
    traceback. Returns the places it was found in."""
    roots = exception_roots(shell)
    done = set()
    for obj, _ in roots:
        _clear_frames(obj, done)
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    for attr in ("InteractiveTB", "SyntaxTB"):
        h = getattr(shell, attr, None)
        if getattr(h, "tb", None) is not None:
            h.tb = None
    syn = getattr(shell, "SyntaxTB", None)
    if getattr(syn, "last_syntax_error", None) is not None:
        syn.last_syntax_error = None
    r = getattr(shell, "last_execution_result", None)
    for attr in ("error_in_exec", "error_before_exec"):
        if getattr(r, attr, None) is not None:
            setattr(r, attr, None)
    return sorted({p for _, p in roots})


def _clear_frames(obj, done):
    """Clear the frames of a traceback or exception (and its context and
    cause) with frame.clear(). Never a mapping: a frame's f_locals is the
    user's own dict when the code ran in exec() or at a module's level."""
    if obj is None or id(obj) in done:
        return
    done.add(id(obj))
    tp = type(obj)
    if issubclass(tp, BaseException):
        for name in ("__traceback__", "__context__", "__cause__"):
            _clear_frames(_EXC[name].__get__(obj), done)
    elif tp is types.TracebackType:
        tb = obj
        while tb is not None:
            f = tb.tb_frame
            try:
                f.clear()
            except RuntimeError:
                pass  # still executing
            else:
                if f.f_code.co_flags & _CO_OPTIMIZED:
                    # A function's frame keeps the snapshot of its locals
                    # that reading f_locals made (Python < 3.13), and clear()
                    # leaves it; reading f_locals again after clear() empties
                    # it. The snapshot is the frame's own dict.
                    f.f_locals
            tb = tb.tb_next


_EXC = {n: BaseException.__dict__[n] for n in ("__traceback__", "__context__", "__cause__")}
_CO_OPTIMIZED = 0x1


def free(shell, out=True, tb=True, cache=True):
    """Run the chosen steps; returns [{"step", "what", "allocated_freed",
    "reserved_freed", "host_freed"}] (bytes, positive when freed)."""
    steps = []

    def step(name, fn):
        a0, r0, h0 = _measure()
        what = fn()
        a1, r1, h1 = _measure()
        steps.append({"step": name, "what": what, "allocated_freed": a0 - a1,
                      "reserved_freed": r0 - r1, "host_freed": h0 - h1})

    if out:
        step("out", lambda: "%d outputs" % drop_outputs(shell))
    if tb:
        step("tb", lambda: ", ".join(drop_exception(shell)) or "no exception kept")
    if cache:
        step("gc", lambda: "%d unreachable objects" % gc.collect())

        def empty():
            tc = _cuda.cuda()
            if tc is None:
                return "CUDA not initialised"
            tc.empty_cache()
            return "cached blocks returned to the driver"

        step("empty_cache", empty)
    return steps
