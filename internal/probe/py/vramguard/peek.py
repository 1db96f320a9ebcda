"""Reading objects without running their code.

A class can run code when it is looked at: a property, __getattribute__,
a metaclass's __getattribute__, __hash__ or __eq__ (a class used as a set
member or compared), __class__ as a property (isinstance reads it), a
container subclass's keys(), __iter__ or __len__, a tensor subclass's
__torch_function__. Everything here reads through the C level of the
built-in types, so none of that runs:

- a class's name, MRO and namespace through type's own descriptors;
- an instance's __dict__ only through the C descriptor CPython gives a
  class (a __dict__ the class defines itself is not called);
- the items of dict, list, tuple, set, deque (and their subclasses) through
  the built-in type's own methods;
- an exception's parts through BaseException's descriptors;
- a tensor's fields through torch's C base class, with __torch_function__
  dispatch off (torch calls a subclass's __torch_function__ from its C
  getters otherwise).

Types are told apart by identity (is, id), never by hashing or comparing a
class.
"""

import collections
import types

_TYPE = type.__dict__
name_of = _TYPE["__name__"].__get__  # name_of(cls)
mro = _TYPE["__mro__"].__get__  # mro(cls)
namespace = _TYPE["__dict__"].__get__  # namespace(cls): its mappingproxy
_GETSET = types.GetSetDescriptorType
_MEMBER = types.MemberDescriptorType

_EXC = BaseException.__dict__
exc_traceback = _EXC["__traceback__"].__get__
exc_context = _EXC["__context__"].__get__
exc_cause = _EXC["__cause__"].__get__
exc_args = _EXC["args"].__get__
exc_dict = _EXC["__dict__"].__get__


def instance_dict(obj):
    """obj's own attribute dict, or None: read through the C descriptor
    CPython made for obj's class (a getset, or a member as
    SimpleNamespace's), never one the class defines."""
    for cls in mro(type(obj)):
        desc = namespace(cls).get("__dict__")
        if desc is None:
            continue
        if type(desc) is not _GETSET and type(desc) is not _MEMBER:
            return None  # the class's own __dict__ (a property): not called
        try:
            d = desc.__get__(obj)
        except Exception:
            return None
        return d if type(d) is dict else None
    return None


def slots(obj):
    """(name, value) of obj's slots, read by their member descriptors."""
    out = []
    for cls in reversed(mro(type(obj))):
        for name, desc in list(namespace(cls).items()):
            if type(desc) is _MEMBER and name not in ("__dict__", "__weakref__"):
                try:
                    out.append((name, desc.__get__(obj)))
                except Exception:
                    pass
    return out


_dict_keys, _dict_values, _dict_items = dict.keys, dict.values, dict.items
_list_iter, _tuple_iter = list.__iter__, tuple.__iter__
_set_iter, _frozenset_iter = set.__iter__, frozenset.__iter__
_deque_iter = collections.deque.__iter__


def items(c):
    """("dict", keys, values) or ("seq", values) or ("set", values) of a
    built-in container or a subclass of one, by the built-in's own methods;
    None for anything else."""
    tp = type(c)
    if issubclass(tp, dict):
        return "dict", list(_dict_keys(c)), list(_dict_values(c))
    if issubclass(tp, list):
        return "seq", list(_list_iter(c))
    if issubclass(tp, tuple):
        return "seq", list(_tuple_iter(c))
    if issubclass(tp, collections.deque):
        return "seq", list(_deque_iter(c))
    if issubclass(tp, set):
        return "set", list(_set_iter(c))
    if issubclass(tp, frozenset):
        return "set", list(_frozenset_iter(c))
    return None


def dict_items(d):
    """d's (key, value) pairs when d is a dict or a subclass; else []."""
    if issubclass(type(d), dict):
        return list(_dict_items(d))
    return []


def seq(c):
    """c's items when c is a list or tuple (or a subclass); else []."""
    tp = type(c)
    if issubclass(tp, list):
        return list(_list_iter(c))
    if issubclass(tp, tuple):
        return list(_tuple_iter(c))
    return []


def plain_repr(k):
    """repr() of a str, int, float or bool; None for anything else (its
    __repr__ is not called)."""
    tk = type(k)
    if tk is str or tk is int or tk is float or tk is bool:
        return repr(k)
    return None


class Tensors:
    """A tensor's fields read through torch's C base class."""

    def __init__(self, torch):
        base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
        ns = namespace(base)
        self.grad = ns["grad"].__get__
        self.is_leaf = ns["is_leaf"].__get__
        self.retains_grad = ns["retains_grad"].__get__
        self.device = ns["device"].__get__
        self.dtype = ns["dtype"].__get__
        self.shape = ns["shape"].__get__
        self.storage = ns.get("untyped_storage") or ns["_storage"]
        self.no_torch_function = torch._C.DisableTorchFunction
