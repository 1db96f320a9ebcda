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

class SneakyOpt(torch.optim.SGD):
    @property
    def state(self):
        fire("optimizer subclass state/param_groups properties")
        return self.__dict__["_s"]
    @state.setter
    def state(self, v):
        self.__dict__["_s"] = v
    @property
    def param_groups(self):
        fire("optimizer subclass state/param_groups properties")
        return self.__dict__["_pg"]
    @param_groups.setter
    def param_groups(self, v):
        self.__dict__["_pg"] = v
opt_w = torch.nn.Parameter(torch.ones(2003 // 4))
opt_hostile = SneakyOpt([opt_w], lr=0.1, momentum=0.9)
opt_w.grad = torch.ones_like(opt_w)
opt_hostile.step()
del opt_w

class SneakyDict(dict):
    def keys(self):
        fire("dict subclass keys/values/items/__iter__")
        return super().keys()
    def values(self):
        fire("dict subclass keys/values/items/__iter__")
        return super().values()
    def items(self):
        fire("dict subclass keys/values/items/__iter__")
        return super().items()
    def __iter__(self):
        fire("dict subclass keys/values/items/__iter__")
        return super().__iter__()
    def __len__(self):
        fire("dict subclass keys/values/items/__iter__")
        return super().__len__()
d_hostile = SneakyDict(t=u8(2004))

class SneakyList(list):
    def __iter__(self):
        fire("list subclass __iter__/__len__/__getitem__")
        return super().__iter__()
    def __len__(self):
        fire("list subclass __iter__/__len__/__getitem__")
        return super().__len__()
    def __getitem__(self, i):
        fire("list subclass __iter__/__len__/__getitem__")
        return super().__getitem__(i)
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

class LoudLocals(dict):
    def items(self):
        fire("an exec() locals mapping's items/keys")
        return super().items()
    def keys(self):
        fire("an exec() locals mapping's items/keys")
        return super().keys()
    def __iter__(self):
        fire("an exec() locals mapping's items/keys")
        return super().__iter__()
'''

ip.run_cell(CASES, store_history=True)
# The last exception: raised in exec() with a hostile mapping as locals.
ip.run_cell("exec('t = torch.ones(2013, dtype=torch.uint8)\\n1 / 0', {'torch': torch}, LoudLocals())",
            store_history=True)
ns = ip.user_ns
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
