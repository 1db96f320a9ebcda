"""The exception that ends a process, as an "exception" line: from
sys.excepthook, and in a child of torch.multiprocessing.spawn, which
catches it before sys.excepthook could see it. The job's own hook still
prints it as it would have."""

import os
import sys

from . import _state


def install():
    """Report the exception that ends the process (an "exception" line),
    then let the job's own hook print it as it would have."""
    prev = sys.excepthook

    def _vramguard_uncaught(etype, value, tb):
        report(etype, value)
        return prev(etype, value, tb)

    sys.excepthook = _vramguard_uncaught


def report(etype, value):
    """Send the exception that ends this process (an "exception" line)."""
    try:
        p = _state.p
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


def patch_spawn_report():
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
                    report(etype, value)
        except BaseException:
            pass
        return orig(limit=limit, chain=chain)

    format_exc._vramguard = True
    format_exc.__wrapped__ = orig
    traceback.format_exc = format_exc
