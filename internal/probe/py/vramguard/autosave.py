"""`%vramguard autosave` and `%vramguard restore`: a notebook's model,
optimizer and scheduler kept on disk, so a dead kernel does not take them.

A save writes the named objects' state_dict()s into one file,
DIR/autosave-<notebook>-YYYYmmdd-HHMMSS-<execution count>.pt (UTC; the
notebook part is its file name and a hash of its path, absent for a kernel
with no notebook), as {"vramguard_autosave": 1, "saved_at": unix time,
"notebook": path, "objects": {name: state_dict}}: staged in DIR under a
fresh name (O_EXCL|O_NOFOLLOW), fsynced and renamed (vramguard.owned), so
torch.load(path, weights_only=True) reads it and a kill mid-save leaves the
previous file whole. DIR must be the user's alone. The last `keep` files of
this notebook stay; another notebook's files in the same directory are
never pruned nor restored from DIR.

When a save runs: right after a named optimizer's step() returns, and after
a cell ends, once `every` seconds have passed since the last save. Both are
points in the thread that trains where the weights and the optimizer's
state agree; a timer thread would save while a step is half applied. A
training loop inside one long cell is saved at its steps, not only when the
cell ends.

The engine, Autosave, takes the objects by name from a namespace (a
mapping, or a callable returning one), so it serves a script as well as a
notebook.
"""

import hashlib
import os
import re
import sys
import time
import weakref

from . import _probe, _steps, owned, weights
from ._units import size

DEFAULT_KEEP = 3
FORMAT = 1
NAME_RE = re.compile(r"^autosave-(?:(?P<tag>[A-Za-z0-9_.+-]+)-)?\d{8}-\d{6}-\d+\.pt$")
ENV_LAST = "VRAMGUARD_LAST_AUTOSAVE"
ENV_NOTEBOOK = "JPY_SESSION_NAME"
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


def notebook_path(user_ns=None):
    """The absolute path of the kernel's notebook, or "": JPY_SESSION_NAME
    (jupyter_server's, relative to its root; the kernel starts in the
    notebook's directory), else VS Code's __vsc_ipynb_file__."""
    p = os.environ.get(ENV_NOTEBOOK, "")
    if not p and user_ns is not None:
        v = user_ns.get("__vsc_ipynb_file__")
        p = v if type(v) is str else ""
    if p and not os.path.isabs(p):
        p = os.path.join(os.getcwd(), os.path.basename(p))
    return p


def notebook_tag(path):
    """The part of an autosave's name that says whose it is: the notebook's
    file name (its safe characters) and 8 hex digits of its path's hash;
    "" for no notebook."""
    if not path:
        return ""
    stem = os.path.splitext(os.path.basename(path))[0]
    stem = re.sub(r"[^A-Za-z0-9_.+-]+", "_", stem).strip("._-")[:40] or "notebook"
    return "%s-%s" % (stem, hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:8])


def tag_of(name):
    """The notebook tag in an autosave file's name, "" for none, None when
    the name is not an autosave's."""
    m = NAME_RE.match(name)
    return None if m is None else (m.group("tag") or "")


def files(d, tag=None):
    """This user's autosave files in directory d (of notebook tag, when
    given), oldest first."""
    try:
        od = owned.Dir.open(d) if not isinstance(d, owned.Dir) else d
    except owned.Unsafe:
        return []
    try:
        ents = [(st.st_mtime, name) for name, st, why in od.entries(NAME_RE.match)
                if not why and (tag is None or tag_of(name) == tag)]
    finally:
        if od is not d:
            od.close()
    return [os.path.join(od.path, n) for _, n in sorted(ents)]


class Autosave:
    """Saves named objects' state_dict()s. namespace: the mapping the names
    are looked up in, or a callable returning it; counter: a callable giving
    the number in the file's name (a notebook's execution count); notebook:
    the notebook's path ("" for none), which names the files."""

    def __init__(self, namespace, counter=lambda: 0, notebook="", clock=time.monotonic, wall=time.time, err=None):
        self._ns = namespace if callable(namespace) else (lambda: namespace)
        self.counter = counter
        self.notebook = notebook
        self.tag = notebook_tag(notebook)
        self.clock = clock
        self.wall = wall
        self.err = err
        self.names = []
        self.every = 0.0
        self.dir = ""
        self.odir = None  # owned.Dir, held while autosave is on
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
        ns = self._ns()
        for n in names:
            obj = ns.get(n)
            if obj is None:
                raise AutosaveError("no variable %r in the notebook" % n)
            if not callable(getattr(obj, "state_dict", None)):
                raise AutosaveError("%s (%s) has no state_dict()" % (n, type(obj).__name__))
        d = os.path.abspath(os.path.expanduser(d))
        try:
            od = owned.Dir.open(d, create=True)
        except owned.Unsafe as e:
            raise AutosaveError(str(e)) from None
        if not od.writable():
            od.close()
            raise AutosaveError("%s is not writable" % d)
        od.clean_stages()
        mp, fstype = mount_of(os.path.realpath(d))
        warning = ""
        if fstype in VOLATILE:
            warning = ("%s is on %s (%s at %s): it does not outlive the container; "
                       "give --dir a mounted volume" % (d, fstype, VOLATILE[fstype], mp))
        self.off()
        self.names, self.every, self.dir, self.keep, self.warning = list(names), float(every), d, int(keep), warning
        self.odir = od
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
        if self.odir is not None:
            self.odir.close()
            self.odir = None

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
        ns = self._ns()
        for n in self.names:
            opt = ns.get(n)
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

    def file_name(self, now, count):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
        return "autosave-%s%s-%d.pt" % (self.tag + "-" if self.tag else "", stamp, count)

    def save(self, **extra):
        """One autosave now; returns its path, or "" (the error is reported
        on stderr and in `%vramguard autosave status`). extra: more fields
        of the ckpt event sent to the supervisor."""
        torch = sys.modules.get("torch")
        self.saving = True
        t0 = time.perf_counter()
        path = ""
        try:
            if torch is None:
                raise AutosaveError("torch is not imported")
            if self.odir is None:
                raise AutosaveError("autosave is off")
            objs = {}
            ns = self._ns()
            for n in self.names:
                obj = ns.get(n)
                if obj is None or not callable(getattr(obj, "state_dict", None)):
                    raise AutosaveError("%s is gone or has no state_dict()" % n)
                objs[n] = obj.state_dict()
            now = int(self.wall())
            name = self.file_name(now, int(self.counter() or 0))
            path = os.path.join(self.dir, name)
            payload = {"vramguard_autosave": FORMAT, "saved_at": now, "notebook": self.notebook, "objects": objs}
            orig = getattr(torch.save, "__wrapped__", torch.save)  # the probe's ckpt event is sent below, once
            nbytes = self.odir.write_atomic(name, lambda f: orig(payload, f))
            self.last, self.last_path, self.last_wall, self.last_error = self.clock(), path, now, ""
            self.saves += 1
            _probe.event("ckpt", path=path, bytes=nbytes, seconds=round(time.perf_counter() - t0, 6), atomic=True,
                         ok=True, optimizer_steps=_steps.optimizer_steps, autosave=True, objects=list(objs), **extra)
            self.prune()
            return path
        except Exception as e:
            self.last = self.clock()  # not again at once: the next try is a period away
            self.last_error = "%s: %s" % (type(e).__name__, e) if not isinstance(e, AutosaveError) else str(e)
            _probe.event("ckpt", path=path, atomic=True, ok=False, error=self.last_error[:2000],
                         optimizer_steps=_steps.optimizer_steps, autosave=True, objects=list(self.names), **extra)
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
        """Remove this notebook's own autosaves beyond the newest keep."""
        old = files(self.odir, self.tag)
        for p in old[: max(len(old) - self.keep, 0)]:
            try:
                self.odir.remove(os.path.basename(p))
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


def newest(d, tag=None):
    f = files(d, tag)
    return f[-1] if f else ""


def _pick(d, tag):
    """The newest autosave of notebook tag among the user's own files in
    directory d; AutosaveError naming what else is there when there is
    none."""
    try:
        od = _readonly_dir(d)
    except owned.Unsafe as e:
        raise AutosaveError(str(e)) from None
    try:
        mine, others, foreign = [], [], []
        for name, st, why in od.entries(NAME_RE.match):
            if why:
                foreign.append("%s (%s)" % (name, why))
            elif tag_of(name) == tag:
                mine.append((st.st_mtime, name))
            else:
                others.append(name)
    finally:
        od.close()
    if mine:
        return os.path.join(d, max(mine)[1]), foreign
    msg = "no autosave of %s in %s" % ("this notebook" if tag else "a kernel without a notebook", d)
    if others:
        msg += "; %d of other notebooks (%s): give a file's path to restore one" % (len(others), ", ".join(sorted(others)[-3:]))
    if foreign:
        msg += "; skipped %d not yours: %s" % (len(foreign), ", ".join(sorted(foreign)[-3:]))
    raise AutosaveError(msg)


def _readonly_dir(d):
    """A directory restore only reads: any owner, as its files are checked
    one by one."""
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise owned.Unsafe("cannot open %s: %s" % (d, e.strerror or e)) from None
    return owned.Dir(os.path.abspath(d), fd)


def restore(shell, path, wall=time.time, notebook=None):
    """Load an autosave file (or, from a directory, this notebook's newest
    of the user's own) into the live objects of the same names. Returns the
    lines to print."""
    if notebook is None:
        notebook = notebook_path(getattr(shell, "user_ns", None))
    skipped = []
    if os.path.isdir(path):
        path, skipped = _pick(path, notebook_tag(notebook))
    import torch  # the user asked to load a torch file: importing torch is theirs to ask

    try:
        f = owned.open_file(path)
    except owned.Unsafe as e:
        raise AutosaveError(str(e)) from None
    try:
        with f:
            data = weights.load(torch, f)
    except Exception as e:
        raise AutosaveError("%s is not a loadable autosave: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
    if not isinstance(data, dict) or data.get("vramguard_autosave") != FORMAT or not isinstance(data.get("objects"), dict):
        raise AutosaveError("%s is not a vramguard autosave" % path)
    age = wall() - float(data.get("saved_at") or 0)
    saved_by = data.get("notebook") if type(data.get("notebook")) is str else ""
    head = "restored %s (saved %s ago%s)" % (path, _dur(age), " by " + saved_by if saved_by and saved_by != notebook else "")
    lines = [head]
    for s in skipped:
        lines.append("  skipped %s: not yours" % s)
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


class _Module(type(sys)):
    """This module, callable: vramguard.autosave is this module (the
    notebook side imports it by that name), and vramguard.autosave(model=...,
    ...) is the script API."""

    def __call__(self, **kw):
        from . import script_autosave

        return script_autosave.autosave(**kw)


sys.modules[__name__].__class__ = _Module
