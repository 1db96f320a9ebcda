"""torch.save, watched: a "ckpt" line for every save while the probe
reports (path, bytes, seconds, the optimizer steps so far, or the error),
and with --atomic-save a save to a path staged, fsynced and renamed over
the target, so a process killed midway leaves the previous checkpoint.
"""

import os
import sys
import time

from . import _state, _steps, _wire

SAVE_TMP_PREFIX = ".vramguard-save-"


def patch_save(torch):
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
        p = _state.p
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
            ev["error"] = _wire.err(exc)
        ev["optimizer_steps"] = _steps.optimizer_steps
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
