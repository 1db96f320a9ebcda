"""`%vramguard autosave` and `%vramguard restore`: a notebook's model,
optimizer and scheduler kept on disk, so a dead kernel does not take them.

A save writes the named objects' state_dict()s into one file,
DIR/autosave-YYYYmmdd-HHMMSS-<execution count>.pt (UTC), as
{"vramguard_autosave": 1, "saved_at": unix time, "objects": {name: state_dict}}
with the probe's atomic save (staged, fsynced, renamed), so
torch.load(path, weights_only=True) reads it and a kill mid-save leaves the
previous file whole. The last `keep` files stay.

When a save runs: right after a named optimizer's step() returns, and after
a cell ends, once `every` seconds have passed since the last save. Both are
points in the thread that trains where the weights and the optimizer's
state agree; a timer thread would save while a step is half applied. A
training loop inside one long cell is saved at its steps, not only when the
cell ends.
"""

import os
import re
import sys
import time
import weakref

from . import _probe
from ._units import size

DEFAULT_KEEP = 3
FORMAT = 1
NAME_RE = re.compile(r"^autosave-\d{8}-\d{6}-\d+\.pt$")
ENV_LAST = "VRAMGUARD_LAST_AUTOSAVE"
# File systems that end with the container or the machine's power.
VOLATILE = {"overlay": "the container's writable layer", "tmpfs": "memory (tmpfs)", "ramfs": "memory (ramfs)"}


class AutosaveError(Exception):
    pass


def mount_of(path):
    """(mount point, fstype) of the file system holding path."""
    best, fstype = "", ""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) < 5 or not right:
                    continue
                mp = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
                if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
                    best, fstype = mp, right.split()[0]
    except OSError:
        pass
    return best, fstype


def files(d):
    """Autosave files in d, oldest first."""
    try:
        names = [n for n in os.listdir(d) if NAME_RE.match(n)]
    except OSError:
        return []
    paths = [os.path.join(d, n) for n in names]

    def key(p):
        try:
            return (os.stat(p).st_mtime, p)
        except OSError:
            return (0, p)

    return sorted(paths, key=key)


class Autosave:
    def __init__(self, shell, clock=time.monotonic, wall=time.time, err=None):
        self.shell = shell
        self.clock = clock
        self.wall = wall
        self.err = err
        self.names = []
        self.every = 0.0
        self.dir = ""
        self.keep = DEFAULT_KEEP
        self.last = None  # clock() of the last save
        self.last_path = ""
        self.last_wall = 0.0
        self.saves = 0
        self.last_error = ""
        self.warning = ""
        self.hooks = []  # removable optimizer hooks
        self.saving = False

    def enabled(self):
        return bool(self.names)

    def configure(self, names, every, d, keep):
        """Check DIR, save once now, then keep saving. Returns the warning
        about DIR's file system, if any."""
        for n in names:
            obj = self.shell.user_ns.get(n)
            if obj is None:
                raise AutosaveError("no variable %r in the notebook" % n)
            if not callable(getattr(obj, "state_dict", None)):
                raise AutosaveError("%s (%s) has no state_dict()" % (n, type(obj).__name__))
        d = os.path.abspath(os.path.expanduser(d))
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            raise AutosaveError("cannot create %s: %s" % (d, e.strerror or e)) from None
        if not os.access(d, os.W_OK | os.X_OK):
            raise AutosaveError("%s is not writable" % d)
        mp, fstype = mount_of(os.path.realpath(d))
        warning = ""
        if fstype in VOLATILE:
            warning = ("%s is on %s (%s at %s): it does not outlive the container; "
                       "give --dir a mounted volume" % (d, fstype, VOLATILE[fstype], mp))
        self.off()
        self.names, self.every, self.dir, self.keep, self.warning = list(names), float(every), d, int(keep), warning
        self.hook_optimizers()
        self.save()
        return warning

    def off(self):
        for h in self.hooks:
            try:
                h()
            except Exception:
                pass
        self.hooks = []
        self.names = []

    # when ----------------------------------------------------------------

    def due(self):
        return self.names and not self.saving and (self.last is None or self.clock() - self.last >= self.every)

    def after_cell(self, _rec=None):
        if not self.names:
            return
        self.hook_optimizers()
        if self.due():
            self.save()

    def _after_step(self):
        if self.due():
            self.save()

    def hook_optimizers(self):
        """A post-step hook on each named optimizer (torch >= 2.0:
        register_step_post_hook; 1.x: the instance's _optimizer_step_code,
        which Optimizer.step calls after every step and which still calls the
        class's, counted by the probe)."""
        optim = sys.modules.get("torch.optim")
        opt_t = getattr(optim, "Optimizer", None)
        if opt_t is None:
            return
        hooked = {id(getattr(h, "target", lambda: None)()) for h in self.hooks}
        for n in self.names:
            opt = self.shell.user_ns.get(n)
            if not isinstance(opt, opt_t) or id(opt) in hooked:
                continue
            me = weakref.ref(self)

            def after(*_a, **_k):
                s = me()
                if s is not None:
                    s._after_step()

            reg = getattr(opt, "register_step_post_hook", None)
            if reg is not None:
                handle = reg(lambda o, a, k: after())

                def remove(handle=handle):
                    handle.remove()
            else:
                cls_attr = None
                for klass in type(opt).__mro__:
                    if "_optimizer_step_code" in klass.__dict__:
                        cls_attr = klass.__dict__["_optimizer_step_code"]
                        break
                if cls_attr is None:
                    continue
                ref = weakref.ref(opt)

                def _optimizer_step_code():
                    o = ref()
                    if o is not None:
                        cls_attr.__get__(o, type(o))()
                    after()

                opt._optimizer_step_code = _optimizer_step_code

                def remove(ref=ref):
                    o = ref()
                    if o is not None:
                        o.__dict__.pop("_optimizer_step_code", None)

            remove.target = weakref.ref(opt)
            self.hooks.append(remove)

    # what ----------------------------------------------------------------

    def save(self):
        """One autosave now; returns its path, or "" (the error is reported
        on stderr and in `%vramguard autosave status`)."""
        torch = sys.modules.get("torch")
        self.saving = True
        t0 = time.perf_counter()
        path = ""
        try:
            if torch is None:
                raise AutosaveError("torch is not imported")
            objs = {}
            for n in self.names:
                obj = self.shell.user_ns.get(n)
                if obj is None or not callable(getattr(obj, "state_dict", None)):
                    raise AutosaveError("%s is gone or has no state_dict()" % n)
                objs[n] = obj.state_dict()
            now = int(self.wall())
            count = int(getattr(self.shell, "execution_count", 0) or 0)
            path = os.path.join(self.dir, "autosave-%s-%d.pt" % (time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)), count))
            payload = {"vramguard_autosave": FORMAT, "saved_at": now, "objects": objs}
            orig = getattr(torch.save, "__wrapped__", torch.save)  # the probe's ckpt event is sent below, once
            _probe._AtomicSave.prepare(path, os.getpid()).run(orig, payload, (), {})
            nbytes = os.stat(path).st_size
            self.last, self.last_path, self.last_wall, self.last_error = self.clock(), path, now, ""
            self.saves += 1
            _probe.event("ckpt", path=path, bytes=nbytes, seconds=round(time.perf_counter() - t0, 6), atomic=True,
                         ok=True, optimizer_steps=_probe._optimizer_steps, autosave=True, objects=list(objs))
            self.prune()
            return path
        except Exception as e:
            self.last = self.clock()  # not again at once: the next try is a period away
            self.last_error = "%s: %s" % (type(e).__name__, e) if not isinstance(e, AutosaveError) else str(e)
            _probe.event("ckpt", path=path, atomic=True, ok=False, error=self.last_error[:2000],
                         optimizer_steps=_probe._optimizer_steps, autosave=True, objects=list(self.names))
            out = self.err or sys.stderr
            try:
                out.write("vramguard: autosave failed: %s\n" % self.last_error)
                out.flush()
            except Exception:
                pass
            return ""
        finally:
            self.saving = False

    def prune(self):
        old = files(self.dir)
        for p in old[: max(len(old) - self.keep, 0)]:
            try:
                os.unlink(p)
            except OSError:
                pass

    def status(self):
        if not self.names:
            return "autosave off"
        s = "autosave %s every %s to %s (keep %d)" % (" ".join(self.names), _dur(self.every), self.dir, self.keep)
        if self.last_path:
            s += "; last %s, %s ago" % (os.path.basename(self.last_path), _dur(self.wall() - self.last_wall))
        if self.last_error:
            s += "; last attempt failed: " + self.last_error
        if self.warning:
            s += "; warning: " + self.warning
        return s


def newest(d):
    f = files(d)
    return f[-1] if f else ""


def restore(shell, path, wall=time.time):
    """Load an autosave file (or the newest in a directory) into the live
    objects of the same names. Returns the lines to print."""
    if os.path.isdir(path):
        p = newest(path)
        if not p:
            raise AutosaveError("no autosave-*.pt in %s" % path)
        path = p
    if not os.path.isfile(path):
        raise AutosaveError("%s: no such file" % path)
    import torch  # the user asked to load a torch file: importing torch is theirs to ask

    try:
        data = _load(torch, path)
    except Exception as e:
        raise AutosaveError("%s is not a loadable autosave: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
    if not isinstance(data, dict) or data.get("vramguard_autosave") != FORMAT or not isinstance(data.get("objects"), dict):
        raise AutosaveError("%s is not a vramguard autosave" % path)
    age = wall() - float(data.get("saved_at") or 0)
    lines = ["restored %s (saved %s ago)" % (path, _dur(age))]
    for name, sd in data["objects"].items():
        obj = shell.user_ns.get(name)
        if obj is None:
            lines.append("  %s: skipped, no variable %s in the notebook" % (name, name))
            continue
        load = getattr(obj, "load_state_dict", None)
        if not callable(load):
            lines.append("  %s: skipped, %s has no load_state_dict()" % (name, type(obj).__name__))
            continue
        try:
            load(sd)
        except Exception as e:
            lines.append("  %s: not loaded into %s: %s" % (name, type(obj).__name__, str(e).splitlines()[0] if str(e) else type(e).__name__))
            continue
        lines.append("  %s: loaded into %s (%s)" % (name, type(obj).__name__, _describe(sd, torch)))
    return lines


def _load(torch, path):
    """torch.load(weights_only=True). torch < 2.0's weights-only reader has
    no floats (an optimizer's lr); there the same allow-list of globals is
    applied through a restricted Unpickler, so nothing in the file is run."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        if "Unsupported operand" not in str(e):
            raise
    import pickle
    import types

    allowed = torch._weights_only_unpickler._get_allowed_globals()

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            f = allowed.get("%s.%s" % (module, name))
            if f is None:
                raise pickle.UnpicklingError("%s.%s is not allowed in an autosave" % (module, name))
            return f

    restricted = types.ModuleType("vramguard_restricted_pickle")
    restricted.Unpickler = Unpickler
    restricted.load = pickle.load
    restricted.__version__ = pickle.format_version
    return torch.load(path, map_location="cpu", pickle_module=restricted)


def _describe(sd, torch):
    n, nbytes = 0, 0
    stack = [sd]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            n += 1
            nbytes += v.element_size() * v.nelement()
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    if n == 0:
        return "%d entries, no tensors" % len(sd)
    return "%d tensors, %s" % (n, size(nbytes))


def _dur(s):
    if 0 < s < 1:
        return "%.1fs" % s
    s = max(int(s), 0)
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % divmod(s, 60)
    h, rest = divmod(s, 3600)
    return "%dh%02dm" % (h, rest // 60)
