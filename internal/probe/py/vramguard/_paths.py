"""Who holds each tensor the walk found, and the path a user would type to
reach it (model.layer.weight, opt.state[model.layer.weight]['exp_avg'],
losses[3]). Built after the walk, for the tensors only: the walk records
which container holds what only where it went one object at a time; the
holder of an object reached in bulk is searched for among the containers
of the depth above, all of a depth's at once, bottom up. A million
containers cost no strings.
"""

import bisect
import functools
import gc
from itertools import accumulate, chain, compress, count, repeat
from operator import itemgetter

from . import peek

# A path longer than this keeps its start and its end (a chain thousands
# of containers deep).
MAX_PATH = 400
# The containers of one depth recorded as holding one tensor: the first is
# its holder, the others may be "also"s.
MAX_REFS = 8

# How a node's path extends its parent's (paths are built only for the
# tensors found: a million containers cost no strings).
ROOT, ATTR, ITEM, INDEX, SUFFIX, DICT, STATE, POS = range(8)
NOKEY = object()
_ONE = 1


class Paths:
    """The naming half of the scan (vramguard._scan.Scan): it reads the
    walk's record (walks, groups, found, also, also_bulk, ttypes) and keeps
    its own memo of paths and maps of how containers hold their items
    (memo, keymaps, tensor_path)."""

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
            hits = referrers(list(map(up.objs.__getitem__, up.plain)), set(lazy) | set(again))
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
                if how == ROOT:
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
        if how == ATTR:
            s = attr_path(base, key)
        elif how == ITEM:
            s = attr_path(base, key) if attrs and type(key) is str else base + key_path(key, self.tensor_path)
        elif how == INDEX:
            s = "%s[%d]" % (base, key)
        elif how == DICT:
            return base, group, True
        elif how == STATE:
            p, where, n = key
            s = "%s.state[%s]" % (base, self.tensor_path.get(id(p)) or "%s.%s" % (base, where))
            if n is not NOKEY:
                s += key_path(n, self.tensor_path)
        elif how == POS:
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
            m = self.keymaps[id(parent)] = keymap(parent)
        e = m.get(id(child))
        if e is not None:
            return e
        if peek.instance_dict(parent) is child:
            return DICT, None
        return SUFFIX, ".<held in C by %s>" % peek.name_of(type(parent))


def referrers(batch, targets):
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


def keymap(c):
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
            m.update(zip(map(id, reversed(keys)), zip(repeat(POS), range(len(keys) - 1, -1, -1))))
            m.update(zip(map(id, reversed(vals)), zip(repeat(ITEM), reversed(keys))))
        else:
            items = got[1]
            how = INDEX if got[0] == "seq" else POS
            m.update(zip(map(id, reversed(items)), zip(repeat(how), range(len(items) - 1, -1, -1))))
    # Attributes: slots, then __dict__.
    for name, v in peek.slots(c):
        m[id(v)] = (ATTR, name)
    d = peek.instance_dict(c)
    if d is not None:
        keys = [k for k in d if type(k) is str]
        m.update(zip(map(id, reversed(list(map(d.__getitem__, keys)))), zip(repeat(ATTR), reversed(keys))))
    return m


def attr_path(path, name):
    """model.layer, or model[0] for a Sequential's or ModuleList's child."""
    return "%s[%s]" % (path, name) if name.isdigit() else "%s.%s" % (path, name)


def key_path(k, tensor_path):
    r = peek.plain_repr(k)
    if r is not None:
        return "[%s]" % r
    p = tensor_path.get(id(k))
    if p is not None:
        return "[%s]" % p
    return "[<%s>]" % peek.name_of(type(k))
