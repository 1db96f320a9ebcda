"""The scan behind `%vramguard who`: a breadth-first walk from the roots a
user can name (vramguard.roots), then one record per storage reached.

It descends into containers, modules' parameters, buffers, submodules and
hooks, optimizers' state, objects' attributes, closures and bound methods;
never into modules, classes or library globals. Each storage is counted
once (views share it).

How it stays fast at a million objects: the walk goes one depth at a time,
and the plain containers of a depth (dict, list, tuple, set, frozenset:
almost every object of a big namespace) are expanded together by one
gc.get_referents call, filtered and de-duplicated with C-level map, filter
and set operations, never a Python loop per object. Only the other objects
(tensors, modules, optimizers, functions, instances: few) are looked at one
by one. Which container holds what is not recorded on the way down; it is
found afterwards, for the tensors only, by searching the containers of the
depth above, bottom up (vramguard._paths). Objects gc does not track
(numbers, strings, containers of only those) cannot reach a tensor and are
dropped at once.
"""

import functools
import gc
import types
from itertools import compress, count, repeat
from operator import is_not, itemgetter, methodcaller, not_, or_

from . import peek
from ._paths import ATTR, INDEX, MAX_PATH, NOKEY, ROOT, STATE, SUFFIX, Paths, keymap
from .roots import OUTPUT_CACHE, SHELL_DIRS, cell_of

# Depths: a plain object's attributes are two below it (the object, then
# its __dict__).
MAX_DEPTH = 10000
MAX_ALSO = 3

_ATOMIC = frozenset((
    int, float, complex, str, bytes, bool, type(None), range, slice, type, types.ModuleType,
    types.BuiltinFunctionType, types.BuiltinMethodType, types.CodeType, type(Ellipsis), type(NotImplemented),
    bytearray, memoryview, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.WrapperDescriptorType, types.MethodWrapperType, types.MethodDescriptorType,
    types.CellType,
))

_ATOMIC_IDS = frozenset(map(id, _ATOMIC))

# Expanded in bulk by their referents (and, as the walk meets them, their
# subclasses and plain objects: a plain object's referents are its
# attributes, __dict__ or slots, and its class, which the walk skips).
_PLAIN = frozenset((dict, list, tuple, set, frozenset))

# What the walk does with an object of a type other than the plain five.
(_K_SKIP, _K_BULK, _K_TENSOR, _K_FUNC, _K_METHOD, _K_TB, _K_EXC, _K_MODULE, _K_OPTIM,
 _K_PARTIAL, _K_GEN, _K_FRAME) = range(12)

# A suspended generator's (coroutine's) frame, by the attribute a user
# types to reach it.
_GEN_FRAME = {id(types.GeneratorType): "gi_frame", id(types.CoroutineType): "cr_frame",
              id(types.AsyncGeneratorType): "ag_frame"}


def _gen_frame(g):
    return getattr(g, _GEN_FRAME[id(type(g))], None)


class _Level:
    """The objects first reached at one depth of one walk. The first nbulk
    are referents of the depth above's plain containers: their holder is
    looked up (parent[i]) only when a tensor is below them. The others came
    with an edge, edges[i - nbulk] = (parent index, how, key). plain: the
    indices of the containers whose referents make the next depth."""

    __slots__ = ("objs", "nbulk", "edges", "plain", "parent")

    def __init__(self, objs, nbulk, edges):
        self.objs, self.nbulk, self.edges = objs, nbulk, edges
        self.plain = []
        self.parent = {}


class Scan(Paths):
    """One scan: walk() from each group of roots, then record() one entry
    per storage reached, named by the holder Paths finds."""

    def __init__(self, shell, torch, tensor_types):
        self.shell = shell
        self.Tensor = torch.Tensor
        self.Module = getattr(getattr(torch, "nn", None), "Module", None)
        self.Optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
        self.tensors = peek.Tensors(torch)
        # Types are keyed by id(): a class's own __hash__ or __eq__ (its
        # metaclass's) is never called. The types stay alive: the objects
        # walked hold them.
        self.ttypes = tensor_types  # ids of the exact types of the live tensors
        self.kinds = {}  # id(type) -> kind
        self.bulk_types = set(map(id, _PLAIN))  # ids of types expanded by their referents
        self.one_types = set()  # ids of types looked at one by one
        self.seen = set()  # _addr() of every object walked once
        self.walks = []  # per walk: [_Level]
        self.groups = []  # per walk: the group of each root
        self.found = []  # (tensor, (walk, depth, index)) in the order reached
        self.also = []  # (tensor, parent node or None, how, key): a tensor reached again
        self.also_bulk = {}  # (walk, depth) -> tensors the depth's containers reach again
        self.storages = {}  # (device, data_ptr) -> record
        self.tensor_path = {}  # id(tensor) -> path, for opt.state[param] keys
        self.memo = {}
        self.keymaps = {}
        self.objects = 0
        self.stopped = 0  # the depth a walk stopped at, if MAX_DEPTH cut one
        self.batches = []  # (index in found, count, walk, depth, indices): tensors found together

    # the walk ------------------------------------------------------------

    def walk(self, roots):
        """roots: [(obj, path, group)], walked breadth first."""
        seen, tracked, ttypes = self.seen, gc.is_tracked, self.ttypes
        w = len(self.walks)
        levels = []
        self.walks.append(levels)
        kept, edges, groups = [], [], []
        for obj, path, group in roots:
            if not tracked(obj):
                continue
            if _addr(obj) in seen:
                if id(type(obj)) in ttypes:
                    self.also.append((obj, None, ROOT, (path, group)))
                continue
            seen.add(_addr(obj))
            kept.append(obj)
            edges.append((-1, ROOT, path))
            groups.append(group)
        self.groups.append(groups)
        cand, kids = [], []  # what the depth above holds: in bulk, and with an edge each
        depth = 0
        while True:
            last = depth + 1 >= MAX_DEPTH
            if last:
                self.stopped = depth + 1
            bulk, others = self.split(cand)
            refs = list(filter(tracked, gc.get_referents(*bulk))) if bulk and not last else []
            if refs:
                # Containers that hold nothing gc tracks (a list of numbers)
                # are dead ends, walked as often as they are reached; the
                # others are told apart here, each walked once.
                bulk, dropped = self.dedupe(bulk)
                if dropped:
                    refs = list(filter(tracked, gc.get_referents(*bulk))) if bulk else []
            nplain = len(bulk)
            if others:
                oaddr = list(_addrs(others))
                if len(set(oaddr)) == len(oaddr):
                    # (in C: many tensors in one list are many others)
                    old = list(map(seen.__contains__, oaddr))
                    bulk += compress(others, map(not_, old))
                    seen.update(compress(oaddr, map(not_, old)))
                    again = [v for v in compress(others, old) if id(type(v)) in ttypes]
                    if again:
                        self.also_bulk.setdefault((w, depth - 1), []).extend(again)
                else:
                    for v, a in zip(others, oaddr):
                        if a in seen:
                            if id(type(v)) in ttypes:
                                self.also_bulk.setdefault((w, depth - 1), []).append(v)
                            continue
                        seen.add(a)
                        bulk.append(v)
            if depth:
                kept, edges = [], []
                for v, p, how, key in kids:
                    if not tracked(v):
                        continue
                    a = _addr(v)
                    if a in seen:
                        if id(type(v)) in ttypes:
                            self.also.append((v, (w, depth - 1, p), how, key))
                        continue
                    seen.add(a)
                    kept.append(v)
                    edges.append((p, how, key))
            objs = bulk + kept if kept else bulk
            if not objs:
                break
            lv = _Level(objs, len(bulk), edges)
            levels.append(lv)
            self.objects += len(objs)
            plain = list(range(nplain))
            kids = []  # (object, parent index, how, key)
            if len(objs) > nplain:
                rest = objs[nplain:]
                tids = list(map(id, map(type, rest)))
                kinds = self.kinds
                for v, t in zip(rest, tids):
                    if t not in kinds:
                        self.kind(type(v))
                plain += compress(count(nplain), map(self.bulk_types.__contains__, tids))
                tens = list(compress(count(nplain), map(ttypes.__contains__, tids)))
                if tens:
                    self.tensors_at(w, depth, objs, tens, kids)
                if len(plain) + len(tens) < len(objs):
                    one_types = self.one_types
                    for i, t in zip(count(nplain), tids):
                        if t in one_types and t not in ttypes:
                            v = objs[i]
                            self.one(w, depth, i, v, type(v), kids)
            lv.plain = plain
            if last:
                break
            if len(plain) > nplain:
                more = list(map(objs.__getitem__, plain[nplain:]))
                refs += filter(tracked, gc.get_referents(*more))
            cand = refs
            depth += 1
        self.resolve(w)

    def dedupe(self, objs):
        """objs less those reached before or earlier in objs, all marked
        reached; and whether any were dropped."""
        seen = self.seen
        addrs = set(_addrs(objs))
        if len(addrs) == len(objs) and addrs.isdisjoint(seen):
            seen |= addrs
            return objs, False
        uniq = dict(zip(_addrs(objs), objs))
        for a in seen.intersection(uniq):
            del uniq[a]
        seen.update(uniq)
        return list(uniq.values()), True

    def kind(self, tp):
        k = self.kinds.get(id(tp))
        if k is not None:
            return k
        T, M, O = self.Tensor, self.Module, self.Optimizer
        # (issubclass of a class by a built-in or torch's own base runs only
        # C code: the base's metaclass decides, never tp's)
        if id(tp) in _ATOMIC_IDS or issubclass(tp, type):
            k = _K_SKIP
        elif issubclass(tp, T):
            k = _K_TENSOR
        elif tp is types.FunctionType:
            k = _K_FUNC
        elif tp is types.MethodType:
            k = _K_METHOD
        elif tp is types.TracebackType:
            k = _K_TB
        elif issubclass(tp, BaseException):
            k = _K_EXC
        elif M is not None and issubclass(tp, M):
            k = _K_MODULE
        elif O is not None and issubclass(tp, O):
            k = _K_OPTIM
        elif tp is functools.partial:
            k = _K_PARTIAL
        elif id(tp) in _GEN_FRAME:
            k = _K_GEN
        elif tp is types.FrameType:
            k = _K_FRAME
        else:
            k = _K_BULK
        self.kinds[id(tp)] = k
        if k == _K_BULK:
            self.bulk_types.add(id(tp))
        elif k != _K_SKIP:
            self.one_types.add(id(tp))
        return k

    def split(self, objs):
        """(the objects expanded in bulk, those looked at one by one) of
        objs, in C; modules, classes and numbers are dropped."""
        if not objs:
            return [], []
        tps = list(map(id, map(type, objs)))
        mask = list(map(self.bulk_types.__contains__, tps))
        if all(mask):
            return objs, []
        kinds = self.kinds
        new = {i for i in compress(tps, map(not_, mask)) if i not in kinds}
        if new:
            for o in objs:
                if id(type(o)) in new:
                    new.discard(id(type(o)))
                    self.kind(type(o))
                    if not new:
                        break
            mask = list(map(self.bulk_types.__contains__, tps))
        return list(compress(objs, mask)), list(compress(objs, map(self.one_types.__contains__, tps)))

    def tensors_at(self, w, depth, objs, idxs, kids):
        """The tensors objs[i] for i in idxs, all at once: each is found
        there, and its .grad is below it."""
        ts = list(map(objs.__getitem__, idxs))
        self.batches.append((len(self.found), len(ts), w, depth, idxs))
        self.found += zip(ts, zip(repeat(w), repeat(depth), idxs))
        tn = self.tensors
        try:
            # A non-leaf's .grad is always None, and reading it warns.
            can = list(map(or_, map(tn.is_leaf, ts), map(tn.retains_grad, ts)))
            withg = list(compress(zip(ts, idxs), can))
            grads = list(map(tn.grad, map(itemgetter(0), withg)))
        except Exception:
            return
        for (_, i), g in compress(zip(withg, grads), map(is_not, grads, repeat(None))):
            kids.append((g, i, SUFFIX, ".grad"))

    def one(self, w, depth, i, obj, tp, kids):
        """An object the walk looks at by itself: what it holds, with how."""
        k = self.kind(tp)
        if k == _K_SKIP or k == _K_BULK:
            return
        if k == _K_TENSOR:
            self.found.append((obj, (w, depth, i)))
            tn = self.tensors
            try:
                # A non-leaf's .grad is always None, and reading it warns.
                g = tn.grad(obj) if tn.is_leaf(obj) or tn.retains_grad(obj) else None
            except Exception:
                g = None
            if g is not None:
                kids.append((g, i, SUFFIX, ".grad"))
            return
        out = []
        if k == _K_FUNC:
            out = _closure(obj)
        elif k == _K_METHOD:
            out = [(obj.__self__, SUFFIX, ".__self__"), (obj.__func__, SUFFIX, ".__func__")]
        elif k == _K_TB:
            out = self.frames(obj)
        elif k == _K_EXC:
            out = [(peek.exc_traceback(obj), SUFFIX, ""), (peek.exc_context(obj), SUFFIX, ".__context__"),
                   (peek.exc_cause(obj), SUFFIX, ".__cause__"), (peek.exc_args(obj), SUFFIX, ".args")]
            d = peek.instance_dict(obj)
            if d:
                out += [(v, ATTR, a) for a, v in d.items() if type(a) is str]
        elif k == _K_MODULE:
            for a, v in (peek.instance_dict(obj) or {}).items():
                if type(a) is not str:
                    continue
                if a in ("_parameters", "_buffers", "_modules"):
                    out += [(x, ATTR, n) for n, x in peek.dict_items(v) if type(n) is str]
                elif a.endswith("hooks") and issubclass(type(v), dict):
                    out += [(x, SUFFIX, ".%s[%s]" % (a, peek.plain_repr(n) or "<%s>" % peek.name_of(type(n))))
                            for n, x in peek.dict_items(v)]
                else:
                    out.append((v, ATTR, a))
        elif k == _K_OPTIM:
            d = peek.instance_dict(obj) or {}
            pgs, state = d.get("param_groups"), d.get("state")
            pos = {}
            for gi, pg in enumerate(peek.seq(pgs)):
                params = dict.get(pg, "params", ()) if issubclass(type(pg), dict) else ()
                for pi, p in enumerate(peek.seq(params)):
                    pos[id(p)] = "param_groups[%d]['params'][%d]" % (gi, pi)
            for p, st in peek.dict_items(state):
                where = pos.get(id(p), "<param>")
                if issubclass(type(st), dict):
                    out += [(v, STATE, (p, where, n)) for n, v in peek.dict_items(st)]
                else:
                    out.append((st, STATE, (p, where, NOKEY)))
            if pgs is not None:
                out.append((pgs, ATTR, "param_groups"))
            if state is not None and not issubclass(type(state), dict):
                out.append((state, ATTR, "state"))
            out += [(v, ATTR, a) for a, v in d.items() if type(a) is str and a not in ("state", "param_groups")]
        elif k == _K_GEN:
            f = _gen_frame(obj)
            if f is not None:
                attr = _GEN_FRAME[id(tp)]
                out = [(v, SUFFIX, ".%s.f_locals[%r]" % (attr, n))
                       for n, v in peek.dict_items(_frame_locals(f)) if type(n) is str]
        elif k == _K_FRAME:
            loc = _frame_locals(obj)
            if loc is not None and loc is not self.shell.user_ns and loc is not obj.f_globals:
                out = [(v, SUFFIX, ".f_locals[%r]" % n) for n, v in peek.dict_items(loc) if type(n) is str]
        elif k == _K_PARTIAL:
            out = [(obj.func, SUFFIX, ".func"), (obj.args, SUFFIX, ".args"), (obj.keywords, SUFFIX, ".keywords")]
        for v, how, key in out:
            kids.append((v, i, how, key))

    def frames(self, tb):
        """A traceback's frames, each one's locals named after the function
        and the cell it is in; the cell's own frame (the notebook's
        namespace) and the shell's frames are skipped."""
        kids = []
        user_ns = self.shell.user_ns
        while tb is not None:
            f = tb.tb_frame
            code = f.f_code
            loc = _frame_locals(f)
            if loc is not None and loc is not user_ns and loc is not f.f_globals and \
                    not code.co_filename.startswith(SHELL_DIRS):
                where = cell_of(self.shell, code.co_filename) or "%s:%d" % (code.co_filename, tb.tb_lineno)
                kids += [(v, SUFFIX, ": %s() in %s, %s" % (code.co_name, where, k))
                         for k, v in peek.dict_items(loc) if type(k) is str]
            tb = tb.tb_next
        return kids

    # one record per storage ---------------------------------------------

    def read(self, ts):
        """(device, data_ptr, nbytes, dtype, shape) of each tensor's storage,
        None for one without (sparse, meta, a subclass without storage):
        read in C, all at once, unless one of them has none."""
        tn = self.tensors
        try:
            sts = list(map(tn.storage, ts))
            ptrs = list(map(int, map(_data_ptr, sts)))
            sizes = list(map(int, map(_nbytes, sts)))
            devs = list(map(str, map(tn.device, ts)))
            dts = list(map(str, map(tn.dtype, ts)))
            shapes = list(map(tn.shape, ts))  # torch.Size: a tuple
            return list(zip(devs, ptrs, sizes, dts, shapes))
        except Exception:
            if len(ts) == 1:
                return [None]
            return [self.read([t])[0] for t in ts]

    def storage(self, t, info, path, group):
        if info is None:
            return
        dev, ptr, nbytes, dtype, shape = info
        key = (dev, ptr)
        rec = self.storages.get(key)
        if rec is None:
            self.tensor_path.setdefault(id(t), path)
            self.storages[key] = {
                "path": path, "group": group, "bytes": nbytes, "device": dev,
                "dtype": dtype[6:] if dtype.startswith("torch.") else dtype, "shape": shape, "data_ptr": ptr,
            }
        elif rec["group"] != group and not (group == OUTPUT_CACHE and rec["group"].startswith("Out[")):
            # (_, _N and the shell's copies of Out[n] are Out[n] again)
            also = rec.setdefault("also", [])
            if len(also) < MAX_ALSO and path not in also:
                also.append(path)

    def record(self):
        """Every tensor found, its holder first, then every other path that
        reaches it."""
        found = self.found
        batches = dict((b[0], b) for b in self.batches)
        k = 0
        while k < len(found):
            b = batches.get(k)
            if b is not None and self.record_batch(*b):
                k += b[1]
                continue
            n = b[1] if b is not None else 1
            for (t, node), info in zip(found[k:k + n], self.read(list(map(itemgetter(0), found[k:k + n])))):
                path, group, _ = self.path(node)
                self.storage(t, info, path, group)
            k += n
        for (t, node, how, key), info in zip(self.also, self.read(list(map(itemgetter(0), self.also)))):
            if node is None:
                path, group = key
            else:
                w, d, p = node
                path, group, _ = self.extend(self.path(node), self.walks[w][d].objs[p], t, how, key)
            self.storage(t, info, path, group)

    def record_batch(self, start, n, w, d, idxs):
        """The tensors found[start:start+n], all at once, when they are the
        new storages of items of one list or tuple (a `losses.append(loss)`
        list): their paths and records are made in C. False (nothing done)
        for any other case."""
        lv = self.walks[w][d]
        parents = set(map(lv.parent.get, idxs))
        if len(parents) != 1:
            return False
        p = parents.pop()
        if p is None:
            return False
        up = self.path((w, d - 1, p))
        if up[2] or len(up[0]) > MAX_PATH - 12:
            return False
        parent = self.walks[w][d - 1].objs[p]
        m = self.keymaps.get(id(parent))
        if m is None:
            m = self.keymaps[id(parent)] = keymap(parent)
        ts = list(map(itemgetter(0), self.found[start:start + n]))
        es = list(map(m.get, map(id, ts)))
        if None in es or not all(map(INDEX.__eq__, map(itemgetter(0), es))):
            return False
        infos = self.read(ts)
        if None in infos:
            return False
        devs, ptrs, sizes, dts, shapes = zip(*infos)
        keys = list(zip(devs, ptrs))
        if len(set(keys)) != len(keys) or not self.storages.keys().isdisjoint(keys):
            return False
        paths = list(map((up[0].replace("%", "%%") + "[%d]").__mod__, map(itemgetter(1), es)))
        dts = map(_STRIP_TORCH, dts)
        self.storages.update(zip(keys, map(dict, map(zip, repeat(_REC_KEYS),
                                                      zip(paths, repeat(up[1]), sizes, devs, dts, shapes, ptrs)))))
        tp = self.tensor_path
        new = dict(zip(map(id, ts), paths))
        new.update(tp)  # (a path known before wins, as setdefault)
        tp.update(new)
        return True


_REC_KEYS = ("path", "group", "bytes", "device", "dtype", "shape", "data_ptr")
_STRIP_TORCH = methodcaller("removeprefix", "torch.")
_data_ptr = methodcaller("data_ptr")
_nbytes = methodcaller("nbytes")


# The key the walk tells objects apart by: object's own pointer hash, which
# any object has (a list's or a tensor's class may hide it or override
# it), a rotation of the address, so one object, one key, and spread well
# in a set, where id()'s low zero bits would make every lookup probe.
_addr = object.__hash__


def _addrs(objs):
    return map(_addr, objs)


def _frame_locals(f):
    """A frame's locals as a dict, or None. A function's frame gives the
    snapshot Python makes of its fast locals; another frame's f_locals is
    whatever mapping its code ran with (exec's, a class body's), read only
    when it is a dict (or a subclass, through dict's own methods) and the
    code has no cells, whose refresh would write into it."""
    code = f.f_code
    if not code.co_flags & _CO_OPTIMIZED and (code.co_cellvars or code.co_freevars):
        return None
    loc = f.f_locals
    return loc if issubclass(type(loc), dict) else None


_CO_OPTIMIZED = 0x1


def _closure(fn):
    cells = fn.__closure__
    kids = []
    if cells:
        for name, c in zip(fn.__code__.co_freevars, cells):
            try:
                kids.append((c.cell_contents, SUFFIX, ".<closure %s>" % name))
            except ValueError:  # an empty cell
                pass
    if fn.__defaults__:
        kids.append((fn.__defaults__, SUFFIX, ".__defaults__"))
    if fn.__kwdefaults__:
        kids.append((fn.__kwdefaults__, SUFFIX, ".__kwdefaults__"))
    return kids
