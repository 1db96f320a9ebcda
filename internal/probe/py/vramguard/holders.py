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
storage is counted once (views share it). gc's list of objects gives the
tensors no name reaches.

How it stays fast at a million objects: the walk goes one depth at a time,
and the plain containers of a depth (dict, list, tuple, set, frozenset:
almost every object of a big namespace) are expanded together by one
gc.get_referents call, filtered and de-duplicated with C-level map, filter
and set operations, never a Python loop per object. Only the other objects
(tensors, modules, optimizers, functions, instances: few) are looked at one
by one. Which container holds what is not recorded on the way down; it is
found afterwards, for the tensors only, by searching the containers of the
depth above, bottom up. Objects gc does not track (numbers, strings,
containers of only those) cannot reach a tensor and are dropped at once.

The scan runs only when asked, pauses the cyclic collector while it runs,
and returns plain figures: no reference to any tensor outlives it.
"""

import bisect
import collections
import functools
import gc
import sys
import time
import types
from itertools import accumulate, chain, compress, count, repeat
from operator import is_not, itemgetter, methodcaller, not_, or_

from . import _cuda, peek

# Depths: a plain object's attributes are two below it (the object, then
# its __dict__).
MAX_DEPTH = 10000
MAX_ALSO = 3
# A path longer than this keeps its start and its end (a chain thousands
# of containers deep).
MAX_PATH = 400
# The containers of one depth recorded as holding one tensor: the first is
# its holder, the others may be "also"s.
MAX_REFS = 8

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
_ROOT, _ATTR, _ITEM, _INDEX, _SUFFIX, _DICT, _STATE, _POS = range(8)
_NOKEY = object()

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


class _Scan:
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
                    self.also.append((obj, None, _ROOT, (path, group)))
                continue
            seen.add(_addr(obj))
            kept.append(obj)
            edges.append((-1, _ROOT, path))
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
            kids.append((g, i, _SUFFIX, ".grad"))

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
                kids.append((g, i, _SUFFIX, ".grad"))
            return
        out = []
        if k == _K_FUNC:
            out = _closure(obj)
        elif k == _K_METHOD:
            out = [(obj.__self__, _SUFFIX, ".__self__"), (obj.__func__, _SUFFIX, ".__func__")]
        elif k == _K_TB:
            out = self.frames(obj)
        elif k == _K_EXC:
            out = [(peek.exc_traceback(obj), _SUFFIX, ""), (peek.exc_context(obj), _SUFFIX, ".__context__"),
                   (peek.exc_cause(obj), _SUFFIX, ".__cause__"), (peek.exc_args(obj), _SUFFIX, ".args")]
            d = peek.instance_dict(obj)
            if d:
                out += [(v, _ATTR, a) for a, v in d.items() if type(a) is str]
        elif k == _K_MODULE:
            for a, v in (peek.instance_dict(obj) or {}).items():
                if type(a) is not str:
                    continue
                if a in ("_parameters", "_buffers", "_modules"):
                    out += [(x, _ATTR, n) for n, x in peek.dict_items(v) if type(n) is str]
                elif a.endswith("hooks") and issubclass(type(v), dict):
                    out += [(x, _SUFFIX, ".%s[%s]" % (a, peek.plain_repr(n) or "<%s>" % peek.name_of(type(n))))
                            for n, x in peek.dict_items(v)]
                else:
                    out.append((v, _ATTR, a))
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
                    out += [(v, _STATE, (p, where, n)) for n, v in peek.dict_items(st)]
                else:
                    out.append((st, _STATE, (p, where, _NOKEY)))
            if pgs is not None:
                out.append((pgs, _ATTR, "param_groups"))
            if state is not None and not issubclass(type(state), dict):
                out.append((state, _ATTR, "state"))
            out += [(v, _ATTR, a) for a, v in d.items() if type(a) is str and a not in ("state", "param_groups")]
        elif k == _K_GEN:
            f = _gen_frame(obj)
            if f is not None:
                attr = _GEN_FRAME[id(tp)]
                out = [(v, _SUFFIX, ".%s.f_locals[%r]" % (attr, n))
                       for n, v in peek.dict_items(_frame_locals(f)) if type(n) is str]
        elif k == _K_FRAME:
            loc = _frame_locals(obj)
            if loc is not None and loc is not self.shell.user_ns and loc is not obj.f_globals:
                out = [(v, _SUFFIX, ".f_locals[%r]" % n) for n, v in peek.dict_items(loc) if type(n) is str]
        elif k == _K_PARTIAL:
            out = [(obj.func, _SUFFIX, ".func"), (obj.args, _SUFFIX, ".args"), (obj.keywords, _SUFFIX, ".keywords")]
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
                    not code.co_filename.startswith(_SHELL_DIRS):
                where = cell_of(self.shell, code.co_filename) or "%s:%d" % (code.co_filename, tb.tb_lineno)
                kids += [(v, _SUFFIX, ": %s() in %s, %s" % (code.co_name, where, k))
                         for k, v in peek.dict_items(loc) if type(k) is str]
            tb = tb.tb_next
        return kids

    # who holds what, for the tensors found --------------------------------

    def resolve(self, w):
        """The holder of every node on a tensor's way up, bottom up: a
        depth's bulk objects are looked up among the containers of the depth
        above, all of a depth's at once."""
        levels = self.walks[w]
        need = [set() for _ in levels]
        for _, (ww, d, i) in self.found:
            if ww == w:
                need[d].add(i)
        for _, node, _, _ in self.also:
            if node is not None and node[0] == w:
                need[node[1]].add(node[2])
        need.append(set())  # (the depth below the last is empty)
        for d in range(len(levels), 0, -1):
            lv, up = levels[d] if d < len(levels) else None, levels[d - 1]
            lazy = {}
            for i in need[d]:
                if i >= lv.nbulk:
                    need[d - 1].add(lv.edges[i - lv.nbulk][0])
                else:
                    lazy[id(lv.objs[i])] = i
            again = {id(t): t for t in self.also_bulk.get((w, d - 1), ())}
            if not lazy and not again:
                continue
            hits = _referrers(list(map(up.objs.__getitem__, up.plain)), set(lazy) | set(again))
            ttypes = self.ttypes
            if not again and all(map(_ONE.__eq__, map(len, hits.values()))):
                # each held by one container of the depth above, as the
                # items of one long list are: all at once
                tids = list(hits)
                ps = list(map(up.plain.__getitem__, map(itemgetter(0), hits.values())))
                lv.parent.update(zip(map(lazy.__getitem__, tids), ps))
                need[d - 1].update(ps)
                continue
            for tid, where in hits.items():
                ps = [up.plain[j] for j in where]
                i = lazy.get(tid)
                if i is not None:
                    lv.parent[i] = ps[0]
                    need[d - 1].add(ps[0])
                    obj = lv.objs[i]
                    ps = ps[1:]
                else:
                    obj = again[tid]
                if id(type(obj)) in ttypes:
                    for p in ps:
                        self.also.append((obj, (w, d - 1, p), None, None))
                        need[d - 1].add(p)

    def path(self, node):
        """(path, group, whether the node is an object's __dict__), built
        from the nearest node up whose path is known (a loop, not a
        recursion: a chain can be MAX_DEPTH long)."""
        memo = self.memo
        up = []
        while True:
            r = memo.get(node)
            if r is not None:
                break
            w, d, i = node
            lv = self.walks[w][d]
            if i >= lv.nbulk:
                p, how, key = lv.edges[i - lv.nbulk]
                if how == _ROOT:
                    r = memo[node] = (key, self.groups[w][i], False)
                    break
            else:
                p = lv.parent.get(i)
                if p is None:
                    r = memo[node] = ("<holder not found>", "(no name)", False)
                    break
                how = key = None
            up.append((node, p, how, key))
            node = (w, d - 1, p)
        for node, p, how, key in reversed(up):
            w, d, i = node
            r = memo[node] = self.extend(r, self.walks[w][d - 1].objs[p], self.walks[w][d].objs[i], how, key)
        return r

    def extend(self, up, parent, child, how, key):
        base, group, attrs = up
        if how is None:
            how, key = self.edge(parent, child)
        if how == _ATTR:
            s = _attr(base, key)
        elif how == _ITEM:
            s = _attr(base, key) if attrs and type(key) is str else base + _key(key, self.tensor_path)
        elif how == _INDEX:
            s = "%s[%d]" % (base, key)
        elif how == _DICT:
            return base, group, True
        elif how == _STATE:
            p, where, n = key
            s = "%s.state[%s]" % (base, self.tensor_path.get(id(p)) or "%s.%s" % (base, where))
            if n is not _NOKEY:
                s += _key(n, self.tensor_path)
        elif how == _POS:
            s = "list(%s)[%d]" % (base, key)
        else:
            s = base + key
        if len(s) > MAX_PATH:
            s = s[: MAX_PATH // 2] + " … " + s[-(MAX_PATH // 2):]
        return s, group, False

    def edge(self, parent, child):
        """How a plain container (or a subclass) holds child, by identity."""
        m = self.keymaps.get(id(parent))
        if m is None:
            m = self.keymaps[id(parent)] = _keymap(parent)
        e = m.get(id(child))
        if e is not None:
            return e
        if peek.instance_dict(parent) is child:
            return _DICT, None
        return _SUFFIX, ".<held in C by %s>" % peek.name_of(type(parent))

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
            m = self.keymaps[id(parent)] = _keymap(parent)
        ts = list(map(itemgetter(0), self.found[start:start + n]))
        es = list(map(m.get, map(id, ts)))
        if None in es or not all(map(_INDEX.__eq__, map(itemgetter(0), es))):
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
_ONE = 1
_data_ptr = methodcaller("data_ptr")
_nbytes = methodcaller("nbytes")


# The key the walk tells objects apart by: object's own pointer hash, which
# any object has (a list's or a tensor's class may hide it or override
# it), a rotation of the address, so one object, one key, and spread well
# in a set, where id()'s low zero bits would make every lookup probe.
_addr = object.__hash__


def _addrs(objs):
    return map(_addr, objs)


def _referrers(batch, targets):
    """{id: [index in batch]} of the containers whose referents include
    each target: one gc.get_referents per container, matched in C."""
    kl = list(map(gc.get_referents, batch))
    flat = list(chain.from_iterable(kl))
    ends = list(accumulate(map(len, kl)))
    del kl
    hits = list(compress(count(), map(targets.__contains__, map(id, flat))))
    ids = list(map(id, map(flat.__getitem__, hits)))
    if len(set(ids)) == len(ids):
        # each target once: its container's index, in C
        return dict(zip(ids, zip(map(functools.partial(bisect.bisect_right, ends), hits))))
    out = {}
    for h in hits:
        j = bisect.bisect_right(ends, h)
        got = out.setdefault(id(flat[h]), [])
        if len(got) < MAX_REFS and (not got or got[-1] != j):
            got.append(j)
    return out


def _keymap(c):
    """id(item) -> (how, key) for what a container or plain object holds:
    the first key, index or attribute of each item, read without running
    the container's own code (vramguard.peek)."""
    m = {}
    try:
        got = peek.items(c)
    except Exception:
        got = None
    if got is not None:
        # (reversed: the first key or index of an item that is there twice wins)
        if got[0] == "dict":
            keys, vals = got[1], got[2]
            m.update(zip(map(id, reversed(keys)), zip(repeat(_POS), range(len(keys) - 1, -1, -1))))
            m.update(zip(map(id, reversed(vals)), zip(repeat(_ITEM), reversed(keys))))
        else:
            items = got[1]
            how = _INDEX if got[0] == "seq" else _POS
            m.update(zip(map(id, reversed(items)), zip(repeat(how), range(len(items) - 1, -1, -1))))
    # Attributes: slots, then __dict__.
    for name, v in peek.slots(c):
        m[id(v)] = (_ATTR, name)
    d = peek.instance_dict(c)
    if d is not None:
        keys = [k for k in d if type(k) is str]
        m.update(zip(map(id, reversed(list(map(d.__getitem__, keys)))), zip(repeat(_ATTR), reversed(keys))))
    return m


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
    r = peek.plain_repr(k)
    if r is not None:
        return "[%s]" % r
    p = tensor_path.get(id(k))
    if p is not None:
        return "[%s]" % p
    return "[<%s>]" % peek.name_of(type(k))


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
    if type(oh) is dict:
        out += [(v, "Out[%d]" % n, "Out[%d]" % n) for n, v in sorted(oh.items()) if isinstance(n, int)]
    dh = getattr(shell, "displayhook", None)
    for name in ("_", "__", "___"):
        v = shell.user_ns.get(name)
        if v is not None and v is getattr(dh, name, v):
            out.append((v, name, OUTPUT_CACHE))
    hidden = getattr(shell, "user_ns_hidden", None)
    if type(hidden) is dict:
        out += [(v, "shell.user_ns_hidden[%r]" % k, OUTPUT_CACHE) for k, v in list(hidden.items()) if output_name(k)]
    r = getattr(shell, "last_execution_result", None)
    if getattr(r, "result", None) is not None:
        out.append((r.result, "shell.last_execution_result.result", OUTPUT_CACHE))
    return out


def output_name(k):
    """_, __, ___ and _N: the names the display hook sets."""
    return type(k) is str and (k in ("_", "__", "___") or (k[:1] == "_" and k[1:].isdigit()))


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
    s = _Scan(shell, torch, ttypes)
    hidden = getattr(shell, "user_ns_hidden", {}) or {}
    names = [(v, k, k) for k, v in list(shell.user_ns.items())
             if type(k) is str and not _shell_name(k, hidden)]
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
                out.setdefault(id(prm), _attr(p, n))
        for n, sub in reversed(peek.dict_items(d.get("_modules"))):
            if type(n) is str and issubclass(type(sub), Module):
                todo.append((sub, _attr(p, n)))


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
