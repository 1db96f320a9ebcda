"""`%vramguard who` over objects whose classes run code when looked at:
properties, __getattribute__, overridden container methods, metaclasses,
__torch_function__. Each class records its name in FIRED when any of its
code runs; the scan must leave FIRED empty and still name each tensor.
Prints one JSON line for the Go test (TestWhoRunsNoUserCode):

    {"fired": [case...], "cases": {case: path who gave the tensor, or ""},
     "nbytes": {case: bytes}}
"""

import json
import sys

from IPython.core.interactiveshell import InteractiveShell

ip = InteractiveShell.instance(colors="NoColor")
ip.run_cell("import torch, collections")

CASES = r'''
FIRED = set()
def fire(name):
    FIRED.add(name)

def u8(n):
    return torch.ones(n, dtype=torch.uint8)

def loud(name, *methods):
    """A class decorator: each of methods fires name, then does what the
    base class's does."""
    def overriding(base):
        def method(self, *args, **kwargs):
            fire(name)
            return base(self, *args, **kwargs)
        return method
    def decorate(cls):
        for m in methods:
            setattr(cls, m, overriding(getattr(cls.__base__, m)))
        return cls
    return decorate

class GradTensor(torch.Tensor):
    @property
    def grad(self):
        fire("tensor subclass grad property")
        return None
    @property
    def is_leaf(self):
        fire("tensor subclass grad property")
        return True
t_grad = u8(2001).as_subclass(GradTensor)

class FnTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        fire("tensor subclass __torch_function__")
        return super().__torch_function__(func, types, args, kwargs or {})
t_fn = u8(2002).as_subclass(FnTensor)

def loud_property(name, key):
    """A property that fires name when read and keeps its value in
    __dict__[key]."""
    def get(self):
        fire(name)
        return self.__dict__[key]
    def put(self, v):
        self.__dict__[key] = v
    return property(get, put)

class SneakyOpt(torch.optim.SGD):
    state = loud_property("optimizer subclass state/param_groups properties", "_s")
    param_groups = loud_property("optimizer subclass state/param_groups properties", "_pg")
opt_w = torch.nn.Parameter(torch.ones(2003 // 4))
opt_hostile = SneakyOpt([opt_w], lr=0.1, momentum=0.9)
opt_w.grad = torch.ones_like(opt_w)
opt_hostile.step()
del opt_w

@loud("dict subclass keys/values/items/__iter__", "keys", "values", "items", "__iter__", "__len__")
class SneakyDict(dict):
    pass
d_hostile = SneakyDict(t=u8(2004))

@loud("list subclass __iter__/__len__/__getitem__", "__iter__", "__len__", "__getitem__")
class SneakyList(list):
    pass
l_hostile = SneakyList([u8(2005)])

class ClassProp:
    @property
    def __class__(self):
        fire("__class__ property (isinstance)")
        return dict
c_hostile = ClassProp(); c_hostile.t = u8(2006)

class GetAttribute:
    def __getattribute__(self, name):
        fire("__getattribute__ of a plain object")
        return object.__getattribute__(self, name)
    def __getattr__(self, name):
        fire("__getattribute__ of a plain object")
        raise AttributeError(name)
g_hostile = GetAttribute(); object.__setattr__(g_hostile, "t", u8(2007))

class DictProp:
    @property
    def __dict__(self):
        fire("__dict__ property")
        return {}
dp_hostile = DictProp(); dp_hostile.t = u8(2008)

class LoudError(Exception):
    def __getattribute__(self, name):
        fire("exception subclass __getattribute__/args")
        return object.__getattribute__(self, name)
    @property
    def args(self):
        fire("exception subclass __getattribute__/args")
        return ()
e_hostile = LoudError(); BaseException.__dict__["args"].__set__(e_hostile, (u8(2009),))

class LoudModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("buf", u8(2010))
    def __getattribute__(self, name):
        if name not in ("__dict__", "_parameters", "_buffers", "_modules", "__class__", "__setstate__",
                        "_backward_hooks", "_forward_hooks", "_forward_pre_hooks", "training"):
            fire("nn.Module subclass methods and __getattribute__")
        return object.__getattribute__(self, name)
    def named_parameters(self, *a, **k):
        fire("nn.Module subclass methods and __getattribute__")
        return super().named_parameters(*a, **k)
    def parameters(self, *a, **k):
        fire("nn.Module subclass methods and __getattribute__")
        return super().parameters(*a, **k)
FIRED.clear()
m_hostile = LoudModule()

class Meta(type):
    def __hash__(cls):
        fire("metaclass __hash__/__eq__/__getattribute__")
        return 1
    def __eq__(cls, other):
        fire("metaclass __hash__/__eq__/__getattribute__")
        return cls is other
    def __getattribute__(cls, name):
        fire("metaclass __hash__/__eq__/__getattribute__")
        return type.__getattribute__(cls, name)
class MetaHolder(metaclass=Meta):
    pass
mh_hostile = MetaHolder(); object.__setattr__(mh_hostile, "t", u8(2011))

class LoudRepr:
    def __repr__(self):
        fire("a key's __repr__")
        return "LoudRepr()"
    def __hash__(self):
        fire("a key's __repr__")
        return 7
    def __eq__(self, o):
        fire("a key's __repr__")
        return self is o
key = object.__new__(LoudRepr)
k_hostile = {}
dict.__setitem__(k_hostile, key, u8(2012))
FIRED.clear()

@loud("an exec() locals mapping's items/keys", "items", "keys", "__iter__")
class LoudLocals(dict):
    pass
'''

ip.run_cell(CASES, store_history=True)
# The last exception: raised in exec() with a hostile mapping as locals.
ip.run_cell("exec('t = torch.ones(2013, dtype=torch.uint8)\\n1 / 0', {'torch': torch}, LoudLocals())",
            store_history=True)
ns = ip.user_ns
# The traps fire when used, so a FIRED left empty by the scan means the scan
# used none of them (not that a trap was never set).
for obj, calls in ((ns["SneakyDict"](a=1), [("keys",), ("values",), ("items",), ("__iter__",), ("__len__",)]),
                   (ns["SneakyList"]([1]), [("__iter__",), ("__len__",), ("__getitem__", 0)]),
                   (ns["LoudLocals"](), [("items",), ("keys",), ("__iter__",)]),
                   (ns["opt_hostile"], [("state",), ("param_groups",)])):
    for name, *args in calls:
        ns["FIRED"].clear()
        v = getattr(obj, name)
        if callable(v):
            v(*args)
        if not ns["FIRED"]:
            sys.exit("the trap %s.%s did not fire" % (type(obj).__name__, name))
ns["FIRED"].clear()
from vramguard import holders  # noqa: E402

rep = holders.scan(ip)
sizes = {2001: "tensor subclass grad property", 2002: "tensor subclass __torch_function__",
         2003 // 4 * 4: "optimizer subclass state/param_groups properties",
         2004: "dict subclass keys/values/items/__iter__", 2005: "list subclass __iter__/__len__/__getitem__",
         2006: "__class__ property (isinstance)", 2007: "__getattribute__ of a plain object",
         2008: "__dict__ property", 2009: "exception subclass __getattribute__/args",
         2010: "nn.Module subclass methods and __getattribute__", 2011: "metaclass __hash__/__eq__/__getattribute__",
         2012: "a key's __repr__", 2013: "an exec() locals mapping's items/keys"}
cases = {c: "" for c in sizes.values()}
for g in rep["groups"]:
    for r in g["tensors"]:
        c = sizes.get(r["bytes"])
        if c and not cases[c]:
            cases[c] = r["path"]
print(json.dumps({"fired": sorted(ns["FIRED"]), "cases": cases}))
sys.stdout.flush()
