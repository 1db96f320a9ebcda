"""`%vramguard who`'s walk (vramguard.holders) over namespaces built to
test it, in a bare IPython InteractiveShell. Prints one JSON line for the
Go test (TestWhoHolders) to check:

- "report": holders.scan's report;
- "live": every live tensor's storage as gc sees it (pointer, bytes),
  found apart from the walk;
- "evals": for each path in the report that is a Python expression, the
  storage of what the expression evaluates to in the notebook's namespace;
- "warnings": what the scan warned;
- "reachable" (random only): the storages of the tensors a plain walk of
  gc.get_referents from the names reaches, never into classes.

    holders_cases.py cases          the table of shapes in TestWhoHolders
    holders_cases.py random SEED... a random graph of containers and tensors
                                    for each seed, a JSON line each
"""

import collections
import functools
import gc
import json
import random
import sys
import types
import warnings

from IPython.core.interactiveshell import InteractiveShell

# The unnamed reference cycle below must outlive the scan.
gc.disable()
ip = InteractiveShell.instance(colors="NoColor")
ip.run_cell("import torch, collections, functools, types")
import torch  # noqa: E402

from vramguard import holders  # noqa: E402


def u8(n):
    return torch.ones(n, dtype=torch.uint8)


CASES = r'''
t_plain = torch.ones(1000, dtype=torch.uint8)
rows = [{"id": i, "tags": [i]} for i in range(2000)]
rows[1234]["t"] = torch.ones(1001, dtype=torch.uint8)
class Box: pass
box = Box(); box.inner = Box(); box.inner.t = torch.ones(1002, dtype=torch.uint8)
od = collections.OrderedDict(w=torch.ones(1003, dtype=torch.uint8))
Pt = collections.namedtuple("Pt", "x y"); pt = Pt(1, torch.ones(1004, dtype=torch.uint8))
st = {torch.ones(1005, dtype=torch.uint8)}
keyed = {torch.ones(1006, dtype=torch.uint8): "v"}
dd = collections.defaultdict(list); dd["k"].append(torch.ones(1007, dtype=torch.uint8))
class TL(list): pass
tl = TL([torch.ones(1008, dtype=torch.uint8)]); tl.extra = torch.ones(1009, dtype=torch.uint8)
cyc = [torch.ones(1010, dtype=torch.uint8)]; cyc.append(cyc)
shared = [torch.ones(1011, dtype=torch.uint8)]; a_first = {"s": shared}; b_second = {"s": shared}
alias_a = torch.ones(1012, dtype=torch.uint8); alias_b = [alias_a]
twice = [torch.ones(1013, dtype=torch.uint8)] * 3
deep = cur = {}
for _k in range(10):
    cur["n"] = {}; cur = cur["n"]
cur["t"] = torch.ones(1014, dtype=torch.uint8); del cur
nonleaf = torch.ones(4, requires_grad=True) * 2
mod = torch.nn.Linear(2, 2); mod.register_buffer("buf", torch.ones(1015, dtype=torch.uint8))
part = functools.partial(lambda x, y: x, torch.ones(1016, dtype=torch.uint8))
class Holder:
    def m(self): pass
h = Holder(); h.t = torch.ones(1017, dtype=torch.uint8); meth = h.m
ns = types.SimpleNamespace(t=torch.ones(1018, dtype=torch.uint8))
dead = [[1, 2, 3]] * 500 + [torch.ones(1019, dtype=torch.uint8)]
lone = [torch.ones(1020, dtype=torch.uint8)]; lone.append(lone); del lone
seq = torch.nn.Sequential(torch.nn.Linear(3, 3))
opt = torch.optim.SGD(seq.parameters(), lr=0.1, momentum=0.9)
seq(torch.ones(1, 3)).sum().backward(); opt.step()
view_base = torch.ones(1021, dtype=torch.uint8); view_of = view_base[::2]
tup = (1, (2, (torch.ones(1022, dtype=torch.uint8),)))
dq = collections.deque([0, torch.ones(1023, dtype=torch.uint8)])
class Slotted:
    __slots__ = ("a", "b")
sl = Slotted(); sl.a = 1; sl.b = torch.ones(1024, dtype=torch.uint8)
def gen():
    t = torch.ones(1025, dtype=torch.uint8)
    yield 1
    yield t
g_gen = gen(); next(g_gen)
deep51 = torch.ones(1026, dtype=torch.uint8)
for _k in range(51):
    deep51 = [deep51]
chain = torch.ones(1027, dtype=torch.uint8)
for _k in range(5000):
    chain = [chain]
losses = [torch.tensor(float(_k)) for _k in range(3)]
'''


def random_graph(seed):
    """Containers of every kind the walk knows, tensors of distinct sizes in
    them, shared references and cycles, some bound to names."""
    rnd = random.Random(seed)

    class Obj:
        pass

    conts = []
    for i in range(400):
        kind = rnd.choice(("list", "dict", "obj", "odict", "intdict"))
        conts.append({"list": list, "dict": dict, "obj": Obj, "odict": collections.OrderedDict,
                      "intdict": dict}[kind]())
        conts[-1] = (kind, conts[-1])
    tensors = [u8(8 * (i + 1)) for i in range(300)]

    def put(c, v):
        kind, o = c
        if kind == "list":
            o.append(v)
        elif kind == "obj":
            setattr(o, "a%d" % len(o.__dict__), v)
        elif kind == "intdict":
            o[len(o) * 7 + 3] = v
        else:
            o["k%d" % len(o)] = v

    for t in tensors:
        put(rnd.choice(conts), t)
        if rnd.random() < 0.2:  # held twice
            put(rnd.choice(conts), t)
    for _ in range(800):
        a, b = rnd.choice(conts), rnd.choice(conts)
        put(a, b[1])  # shared references and cycles
    for _ in range(200):
        put(rnd.choice(conts), [rnd.random() for _ in range(5)])  # dead ends
    names = {}
    for i, c in enumerate(rnd.sample(conts, 12)):
        names["g%d" % i] = c[1]
    names["T"] = Obj
    return names


def reachable(roots):
    seen, todo, out = set(), list(roots), {}
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        if issubclass(type(o), torch.Tensor):
            s = storage(o)
            out[s["ptr"]] = s
        todo.extend(gc.get_referents(o))
    return list(out.values())


def storage(t):
    try:
        s = t.untyped_storage()
    except AttributeError:
        s = t.storage()
    return {"ptr": int(s.data_ptr()), "bytes": int(s.nbytes()), "device": str(t.device)}


def report(out):
    """Scans the shell's namespace and prints out with the report, the live
    storages and what each path evaluates to, as one JSON line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = holders.scan(ip)
    live = {}
    for o in gc.get_objects():
        if issubclass(type(o), torch.Tensor):
            s = storage(o)
            live[s["ptr"]] = s
    evals = {}
    for g in rep["groups"]:
        for r in g["tensors"]:
            for p in [r["path"]] + r.get("also", []):
                try:
                    v = eval(p, ip.user_ns)
                except SyntaxError:
                    continue
                except Exception as e:
                    evals[p] = {"error": "%s: %s" % (type(e).__name__, e)}
                    continue
                evals[p] = storage(v) if isinstance(v, torch.Tensor) else {"error": "not a tensor: %s" % type(v)}
    out.update(report=rep, live=list(live.values()), evals=evals, warnings=[str(w.message) for w in caught])
    print(json.dumps(out), flush=True)


def main():
    if sys.argv[1] == "cases":
        ip.run_cell(CASES, store_history=True)
        report({})
        return
    # one report per seed, each graph gone (its cycles collected) before
    # the next is built, so every report's live tensors are its graph's
    for seed in sys.argv[2:]:
        names = random_graph(int(seed))
        ip.user_ns.update(names)
        report({"seed": int(seed), "reachable": reachable(names.values())})
        for k in names:
            del ip.user_ns[k]
        del names
        gc.collect()


main()
