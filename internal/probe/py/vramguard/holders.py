"""`%vramguard who`: which of the notebook's names holds each live tensor.

A breadth-first walk from what a user can name, in this order, so a tensor
is attributed to the first of them that reaches it: the notebook's own
variables, the output cache (Out[n], _n, _, __, ___ and the last cell's
result), then every place IPython keeps the last exception (sys.last_value,
sys.last_traceback, sys.last_exc, the shell's traceback object, the last
execution result), where each frame's locals are named after the function
and cell. It descends into containers, modules' parameters, buffers,
submodules and hooks, optimizers' state, objects' attributes, closures and
bound methods; never into modules, classes or library globals. Each
storage is counted once (views share it). A second pass over gc's objects
finds tensors no name reaches.

The scan runs only when asked, and returns plain figures: no reference to
any tensor outlives it.
"""

import functools
import gc
import sys
import time
import types

from . import _cuda

MAX_DEPTH = 16
MAX_ALSO = 3

_ATOMIC = frozenset((
    int, float, complex, str, bytes, bool, type(None), range, slice, type, types.ModuleType,
    types.BuiltinFunctionType, types.BuiltinMethodType, types.CodeType, type(Ellipsis), type(NotImplemented),
    bytearray, memoryview, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.WrapperDescriptorType, types.MethodWrapperType, types.MethodDescriptorType,
))

# IPython's own names in a notebook's namespace: the walk names these roots
# by where the shell keeps them instead.
_SHELL_NAMES = frozenset(("In", "Out", "_oh", "_ih", "_dh", "_", "__", "___", "_i", "_ii", "_iii",
                          "get_ipython", "exit", "quit", "__builtins__", "__builtin__", "__name__",
                          "__doc__", "__package__", "__loader__", "__spec__"))


def _shell_name(name, hidden):
    if name in _SHELL_NAMES or name in hidden:
        return True
    if name.startswith("_") and name[1:].isdigit():
        return True  # _3: Out[3]
    if name.startswith("_i") and name[2:].isdigit():
        return True  # _i3: In[3]
    return False


def cell_of(shell, filename):
    """In[N] for a file name IPython compiled a cell under, else None."""
    try:
        n = shell.compile._filename_map.get(filename)
    except Exception:
        n = None
    return "In[%d]" % n if isinstance(n, int) else None


# How a node's path extends its parent's (paths are built only for the
# tensors found: a million containers cost no strings).
_ROOT, _ATTR, _ITEM, _INDEX, _SUFFIX = range(5)


class _Scan:
    def __init__(self, shell, torch):
        self.shell = shell
        self.Tensor = torch.Tensor
        self.Module = getattr(getattr(torch, "nn", None), "Module", None)
        self.Optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
        self.seen = set()
        self.storages = {}  # (device, data_ptr) -> record
        self.tensor_path = {}  # id(tensor) -> path, for opt.state[param] keys
        self.nodes = []  # node -> (parent node or -1, how, key)
        self.objects = 0

    def path(self, node):
        chain = []
        nodes = self.nodes
        while node >= 0:
            chain.append(node)
            node = nodes[node][0]
        s = ""
        for n in reversed(chain):
            _, how, k = nodes[n]
            if how == _ROOT:
                s = k
            elif how == _ATTR:
                s = _attr(s, k)
            elif how == _ITEM:
                s += _key(k, self.tensor_path)
            elif how == _INDEX:
                s += "[%d]" % k
            else:
                s += k
        return s

    def storage(self, t, node, group):
        try:
            try:
                st = t.untyped_storage()
            except AttributeError:  # torch < 2.0
                st = t.storage()
            ptr, nbytes = int(st.data_ptr()), int(st.nbytes())
            dev = str(t.device)
        except Exception:
            return  # sparse, meta, or a tensor subclass without storage
        key = (dev, ptr)
        rec = self.storages.get(key)
        if rec is None:
            path = self.path(node) if isinstance(node, int) else node
            self.tensor_path.setdefault(id(t), path)
            self.storages[key] = {
                "path": path, "group": group, "bytes": nbytes, "device": dev,
                "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "data_ptr": ptr,
            }
        elif rec["group"] != group and not (group == OUTPUT_CACHE and rec["group"].startswith("Out[")):
            # (_, _N and the shell's copies of Out[n] are Out[n] again)
            also = rec.setdefault("also", [])
            if len(also) < MAX_ALSO:
                path = self.path(node) if isinstance(node, int) else node
                if path not in also:
                    also.append(path)

    def walk(self, roots):
        """roots: [(obj, path, group)], walked breadth first."""
        seen, nodes = self.seen, self.nodes
        Tensor, Module, Optimizer = self.Tensor, self.Module, self.Optimizer
        seen_add, node_append = seen.add, nodes.append
        level = []
        for obj, path, group in roots:
            tp = type(obj)
            if tp in _ATOMIC:
                continue
            node = len(nodes)
            node_append((-1, _ROOT, path))
            if issubclass(tp, Tensor):
                # recorded now, so a later root of the same walk (_ after
                # Out[3]) is an "also", not the holder
                self.storage(obj, node, group)
            if id(obj) in seen:
                continue
            seen_add(id(obj))
            level.append((obj, node, group))
        depth = 0
        visited = 0
        while level and depth < MAX_DEPTH:
            nxt = []
            add = nxt.append
            visited += len(level)
            for obj, node, group in level:
                tp = type(obj)
                # The two shapes almost every object of a big namespace has,
                # walked inline.
                if tp is dict:
                    for k, v in obj.items():
                        tv = type(v)
                        if tv in _ATOMIC:
                            continue
                        i = id(v)
                        if i in seen:
                            if issubclass(tv, Tensor):
                                node_append((node, _ITEM, k))
                                self.storage(v, len(nodes) - 1, group)
                            continue
                        seen_add(i)
                        add((v, len(nodes), group))
                        node_append((node, _ITEM, k))
                    continue
                if tp is list or tp is tuple:
                    j = -1
                    for v in obj:
                        j += 1
                        tv = type(v)
                        if tv in _ATOMIC:
                            continue
                        i = id(v)
                        if i in seen:
                            if issubclass(tv, Tensor):
                                node_append((node, _INDEX, j))
                                self.storage(v, len(nodes) - 1, group)
                            continue
                        seen_add(i)
                        add((v, len(nodes), group))
                        node_append((node, _INDEX, j))
                    continue
                kids = None  # [(value, how, key)]
                if issubclass(tp, Tensor):
                    self.storage(obj, node, group)
                    g = obj.grad
                    if g is not None:
                        kids = [(g, _SUFFIX, ".grad")]
                elif tp is set or tp is frozenset:
                    kids = [(v, _SUFFIX, "{...}") for v in obj]
                elif tp is types.FunctionType:
                    kids = _closure(obj)
                elif tp is types.MethodType:
                    kids = [(obj.__self__, _SUFFIX, ".__self__"), (obj.__func__, _SUFFIX, ".__func__")]
                elif tp is types.TracebackType:
                    kids = self.frames(obj)
                elif issubclass(tp, BaseException):
                    kids = [(obj.__traceback__, _SUFFIX, ""), (obj.__context__, _SUFFIX, ".__context__"),
                            (obj.__cause__, _SUFFIX, ".__cause__"), (obj.args, _SUFFIX, ".args")]
                    d = getattr(obj, "__dict__", None)
                    if d:
                        kids += [(v, _ATTR, k) for k, v in d.items()]
                elif Module is not None and issubclass(tp, Module):
                    kids = []
                    for k, v in obj.__dict__.items():
                        if k in ("_parameters", "_buffers", "_modules"):
                            kids += [(x, _ATTR, n) for n, x in v.items()]
                        elif k.endswith("hooks") and isinstance(v, dict):
                            kids += [(x, _SUFFIX, ".%s[%r]" % (k, n)) for n, x in v.items()]
                        else:
                            kids.append((v, _ATTR, k))
                elif Optimizer is not None and issubclass(tp, Optimizer):
                    kids = []
                    pos = {}
                    for gi, pg in enumerate(obj.param_groups):
                        for pi, p in enumerate(pg.get("params", ())):
                            pos[id(p)] = "param_groups[%d]['params'][%d]" % (gi, pi)
                    base = self.path(node)
                    for p, st in obj.state.items():
                        key = ".state[%s]" % (self.tensor_path.get(id(p)) or "%s.%s" % (base, pos.get(id(p), "<param>")))
                        if isinstance(st, dict):
                            kids += [(v, _SUFFIX, "%s[%r]" % (key, n)) for n, v in st.items()]
                        else:
                            kids.append((st, _SUFFIX, key))
                    kids.append((obj.param_groups, _ATTR, "param_groups"))
                    kids += [(v, _ATTR, k) for k, v in obj.__dict__.items() if k not in ("state", "param_groups")]
                elif tp is functools.partial:
                    kids = [(obj.func, _SUFFIX, ".func"), (obj.args, _SUFFIX, ".args"), (obj.keywords, _SUFFIX, ".keywords")]
                elif tp is not types.FrameType:
                    # Not getattr: a class's own __getattribute__ may warn or
                    # compute (torch.distributed.reduce_op does both).
                    try:
                        d = object.__getattribute__(obj, "__dict__")
                    except Exception:
                        d = None
                    if type(d) is dict:
                        kids = [(v, _ATTR, k) for k, v in d.items()]
                if not kids:
                    continue
                for v, how, k in kids:
                    tv = type(v)
                    if tv in _ATOMIC:
                        continue
                    if id(v) in seen:
                        if issubclass(tv, Tensor):
                            node_append((node, how, k))
                            self.storage(v, len(nodes) - 1, group)
                        continue
                    seen_add(id(v))
                    add((v, len(nodes), group))
                    node_append((node, how, k))
            level = nxt
            depth += 1
        self.objects += visited

    def frames(self, tb):
        """A traceback's frames, each one's locals named after the function
        and the cell it is in; the cell's own frame (the notebook's
        namespace) and the shell's frames are skipped."""
        kids = []
        user_ns = self.shell.user_ns
        while tb is not None:
            f = tb.tb_frame
            loc = f.f_locals
            code = f.f_code
            if loc is not user_ns and loc is not f.f_globals and not code.co_filename.startswith(_SHELL_DIRS):
                where = cell_of(self.shell, code.co_filename) or "%s:%d" % (code.co_filename, tb.tb_lineno)
                kids += [(v, _SUFFIX, ": %s() in %s, %s" % (code.co_name, where, k)) for k, v in loc.items()]
            tb = tb.tb_next
        return kids


def _package_dirs(*names):
    import os

    out = []
    for n in names:
        m = sys.modules.get(n)
        f = getattr(m, "__file__", None)
        if f:
            out.append(os.path.dirname(os.path.abspath(f)) + os.sep)
    return tuple(out) or ("\0",)


# Frames of the shell's own code (run_code's, the kernel's) hold the shell,
# not the user's objects: a traceback's walk skips them.
_SHELL_DIRS = _package_dirs("IPython", "ipykernel", "vramguard")


def _attr(path, name):
    """model.layer, or model[0] for a Sequential's or ModuleList's child."""
    return "%s[%s]" % (path, name) if name.isdigit() else "%s.%s" % (path, name)


def _key(k, tensor_path):
    tk = type(k)
    if tk is str or tk is int or tk is float or tk is bool:
        return "[%r]" % (k,)
    p = tensor_path.get(id(k))
    if p is not None:
        return "[%s]" % p
    return "[<%s>]" % tk.__name__


def _closure(fn):
    cells = fn.__closure__
    kids = []
    if cells:
        for name, c in zip(fn.__code__.co_freevars, cells):
            try:
                kids.append((c.cell_contents, _SUFFIX, ".<closure %s>" % name))
            except ValueError:  # an empty cell
                pass
    if fn.__defaults__:
        kids.append((fn.__defaults__, _SUFFIX, ".__defaults__"))
    if fn.__kwdefaults__:
        kids.append((fn.__kwdefaults__, _SUFFIX, ".__kwdefaults__"))
    return kids


def exception_roots(shell):
    """(object, path) of every place IPython keeps the last exception."""
    out = []
    for name in ("last_traceback", "last_value", "last_exc"):
        v = getattr(sys, name, None)
        if v is not None:
            out.append((v, "sys." + name))
    for attr, label in (("InteractiveTB", "shell.InteractiveTB.tb"), ("SyntaxTB", "shell.SyntaxTB.tb")):
        tb = getattr(getattr(shell, attr, None), "tb", None)
        if tb is not None:
            out.append((tb, label))
    r = getattr(shell, "last_execution_result", None)
    for attr in ("error_in_exec", "error_before_exec"):
        v = getattr(r, attr, None)
        if v is not None:
            out.append((v, "shell.last_execution_result." + attr))
    return out


OUTPUT_CACHE = "output cache"


def output_roots(shell):
    """(object, path, group) of the output cache: Out[n], then the other
    places the shell keeps outputs (grouped as "output cache")."""
    out = []
    oh = shell.user_ns.get("_oh")
    if isinstance(oh, dict):
        out += [(v, "Out[%d]" % n, "Out[%d]" % n) for n, v in sorted(oh.items()) if isinstance(n, int)]
    dh = getattr(shell, "displayhook", None)
    for name in ("_", "__", "___"):
        v = shell.user_ns.get(name)
        if v is not None and v is getattr(dh, name, v):
            out.append((v, name, OUTPUT_CACHE))
    hidden = getattr(shell, "user_ns_hidden", None)
    if isinstance(hidden, dict):
        out += [(v, "shell.user_ns_hidden[%r]" % k, OUTPUT_CACHE) for k, v in list(hidden.items()) if output_name(k)]
    r = getattr(shell, "last_execution_result", None)
    if getattr(r, "result", None) is not None:
        out.append((r.result, "shell.last_execution_result.result", OUTPUT_CACHE))
    return out


def output_name(k):
    """_, __, ___ and _N: the names the display hook sets."""
    return isinstance(k, str) and (k in ("_", "__", "___") or (k[:1] == "_" and k[1:].isdigit()))


def scan(shell, unreachable=True):
    """The report `%vramguard who` prints: plain data only."""
    t0 = time.perf_counter()
    torch = sys.modules.get("torch")
    rep = {"groups": [], "cuda": [], "unreachable": [], "objects": 0}
    if torch is None or not hasattr(torch, "Tensor"):
        rep["seconds"] = time.perf_counter() - t0
        return rep
    s = _Scan(shell, torch)
    hidden = getattr(shell, "user_ns_hidden", {}) or {}
    names = [(v, k, k) for k, v in list(shell.user_ns.items())
             if isinstance(k, str) and not _shell_name(k, hidden)]
    if s.Module is not None:
        # Parameters by the name a user types (model.layer.weight), for
        # optimizer state keyed by them, whichever the walk reaches first.
        for v, k, _ in names:
            if isinstance(v, s.Module):
                try:
                    for n, p in v.named_parameters():
                        path = k
                        for part in n.split("."):
                            path = _attr(path, part)
                        s.tensor_path.setdefault(id(p), path)
                except Exception:
                    pass
    s.walk(names)
    # The output cache and the last exception are grouped under one root
    # each, so the table says "Out[3]" or "last exception" as a user would.
    s.walk(output_roots(shell))
    s.walk([(v, p, "last exception") for v, p in exception_roots(shell)])
    found = s.storages
    if unreachable:
        # Tensors alive that no name reaches: in a reference cycle waiting
        # for gc, a library's global, a C extension's hold.
        T = s.Tensor
        seen = s.seen
        for o in gc.get_objects():
            if issubclass(type(o), T) and id(o) not in seen:
                s.storage(o, "<no name reaches it>", "(no name)")
    storages = list(found.values())
    s = None
    names = None
    _cells_from_allocator(shell, storages)
    groups = {}
    for r in storages:
        r.pop("data_ptr", None)
        g = groups.setdefault(r["group"], {"holder": r["group"], "bytes": 0, "tensors": []})
        g["bytes"] += r["bytes"]
        g["tensors"].append(r)
        del r["group"]
    for g in groups.values():
        g["tensors"].sort(key=lambda r: -r["bytes"])
    rep["groups"] = sorted(groups.values(), key=lambda g: -g["bytes"])
    rep["objects"] = len(storages)
    named = {}
    for r in storages:
        if r["path"] != "<no name reaches it>":
            named[r["device"]] = named.get(r["device"], 0) + r["bytes"]
    for d, (alloc, res) in sorted(_cuda.totals().items()):
        dev = "cuda:%d" % d
        n = named.get(dev, 0)
        rep["cuda"].append({"device": dev, "allocated_bytes": alloc, "named_bytes": n,
                            "unnamed_bytes": max(alloc - n, 0), "reserved_bytes": res,
                            "cache_bytes": max(res - alloc, 0)})
    rep["cpu_named_bytes"] = named.get("cpu", 0)
    rep["seconds"] = time.perf_counter() - t0
    return rep


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
