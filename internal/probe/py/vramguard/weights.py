"""Reading a torch.save file without running anything in it.

load(torch, f) reads f, a binary file the caller opened (and checked), as
`%vramguard restore` needs it: torch's own weights-only reader first
(torch.load(weights_only=True)); where that reader lacks an opcode a
plain state_dict uses (torch 1.x has no BINFLOAT, the opcode of every
float, an optimizer's lr), the same file again through Reader, a decoder
with the same allow-list and the same rules plus that one opcode.

Refused before either reader sees the file: anything but the zip archive
torch.save writes (the legacy format begins with pickles torch reads with
the pickle module it is given, before any allow-list), and a TorchScript
archive (torch.load hands those to torch.jit.load, whose __setstate__
methods run as it loads, even under weights_only=True on torch 1.x).
Nothing reaches Python's pickle module.
"""

import struct
import types
from collections import OrderedDict

# Pickle opcodes (pickle.py's names).
_MARK, _STOP, _POP = b"(", b".", b"0"
_BINFLOAT, _BININT, _BININT1, _BININT2, _LONG1 = b"G", b"J", b"K", b"M", b"\x8a"
_NONE, _NEWTRUE, _NEWFALSE = b"N", b"\x88", b"\x89"
_BINUNICODE, _SHORT_BINSTRING = b"X", b"U"
_EMPTY_TUPLE, _TUPLE, _TUPLE1, _TUPLE2, _TUPLE3 = b")", b"t", b"\x85", b"\x86", b"\x87"
_EMPTY_LIST, _APPEND, _APPENDS, _EMPTY_DICT, _SETITEM, _SETITEMS = b"]", b"a", b"e", b"}", b"s", b"u"
_GLOBAL, _REDUCE, _BUILD, _NEWOBJ, _BINPERSID = b"c", b"R", b"b", b"\x81", b"Q"
_BINGET, _LONG_BINGET, _BINPUT, _LONG_BINPUT, _PROTO = b"h", b"j", b"q", b"r", b"\x80"

# A state_dict's pickle is small beside its tensors (they are records of
# their own); these bound what a hostile one can make the reader hold.
MAX_MEMO = 1 << 20
MAX_STRING = 64 << 20


class Refused(Exception):
    """The file is not something restore reads; the message says why."""


def load(torch, f):
    """The object a torch.save zip archive holds, read without running
    anything the file names beyond torch's weights-only allow-list."""
    ser = torch.serialization
    if not ser._is_zipfile(f):
        raise Refused("not the zip archive torch.save writes (a legacy or foreign format is not read)")
    f.seek(0)
    with ser._open_zipfile_reader(f) as z:
        if ser._is_torchscript_zip(z):
            raise Refused("a TorchScript archive (loading one runs its code)")
    f.seek(0)
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:
        if "Unsupported operand" not in str(e):
            raise
    # torch's own reading of the archive, with Reader as its pickle module
    # (torch.load itself takes any pickle_module it is given for the real
    # pickle on torch 1.13).
    f.seek(0)
    with ser._open_zipfile_reader(f) as z:
        return ser._load(z, "cpu", _module(torch), encoding="utf-8")


def _module(torch):
    """A stand-in for the pickle module, as torch.load's pickle_module:
    both its Unpickler and its load are Reader."""
    m = types.ModuleType("vramguard_weights")
    allowed = _allowed(torch)

    class Unpickler(Reader):
        def __init__(self, file, **kw):
            super().__init__(file, torch, allowed, **kw)

    def load(file, **kw):
        return Unpickler(file, **kw).load()

    m.Unpickler, m.load, m.__version__ = Unpickler, load, "4.0"
    return m


def _allowed(torch):
    """torch's weights-only allow-list: {"module.name": object}."""
    wo = getattr(torch, "_weights_only_unpickler", None)
    get = getattr(wo, "_get_allowed_globals", None)
    if get is None:
        raise Refused("this torch has no weights-only allow-list to read the file by")
    return dict(get())


class Reader:
    """The pickle opcodes a state_dict saved by torch.save uses (protocol 2),
    under the rules of torch's weights-only reader: globals only from its
    allow-list, calls only of allowed functions, objects built only as
    tensors, parameters and OrderedDicts, persistent ids only torch's storage
    records. Anything else is refused."""

    def __init__(self, file, torch, allowed, encoding="bytes", **_):
        self.read, self.readline = file.read, file.readline
        self.torch, self.allowed, self.encoding = torch, allowed, encoding
        self.callable = {id(v) for v in allowed.values()}
        self.memo = {}

    def persistent_load(self, pid):
        raise Refused("a persistent id outside a torch archive")

    def load(self):
        torch = self.torch
        read, readline = self.read, self.readline
        stack, marks = [], []
        while True:
            op = read(1)
            if not op:
                raise Refused("the pickle ends before its STOP")
            if op == _GLOBAL:
                full = "%s.%s" % (readline()[:-1].decode("utf-8"), readline()[:-1].decode("utf-8"))
                if full not in self.allowed:
                    raise Refused("Unsupported class %s" % full)
                stack.append(self.allowed[full])
            elif op == _REDUCE:
                args = stack.pop()
                fn = stack[-1]
                if id(fn) not in self.callable or type(args) is not tuple:
                    raise Refused("a call of %s, which is not on the allow-list" % type(fn).__name__)
                stack[-1] = fn(*args)
            elif op == _NEWOBJ:
                args = stack.pop()
                cls = stack.pop()
                if cls is not torch.nn.Parameter or type(args) is not tuple:
                    raise Refused("an object of a class other than Parameter")
                stack.append(torch.nn.Parameter(*args))
            elif op == _BUILD:
                state = stack.pop()
                inst = stack[-1]
                if type(inst) is torch.Tensor:
                    inst.set_(*state)
                elif type(inst) is torch.nn.Parameter:
                    inst.__setstate__(state)
                elif type(inst) is OrderedDict and type(state) is dict:
                    inst.__dict__.update(state)
                else:
                    raise Refused("BUILD of a %s" % type(inst).__name__)
            elif op == _BINPERSID:
                pid = stack.pop()
                if type(pid) is not tuple or not pid or _ascii(pid[0]) != "storage":
                    raise Refused("a persistent id other than a storage record")
                stack.append(self.persistent_load(pid))
            elif op == _APPEND:
                v = stack.pop()
                if type(stack[-1]) is not list:
                    raise Refused("APPEND to a %s" % type(stack[-1]).__name__)
                stack[-1].append(v)
            elif op == _APPENDS:
                items, stack = stack, marks.pop()
                if type(stack[-1]) is not list:
                    raise Refused("APPENDS to a %s" % type(stack[-1]).__name__)
                stack[-1].extend(items)
            elif op == _SETITEM:
                v, k = stack.pop(), stack.pop()
                _setitem(stack[-1], k, v)
            elif op == _SETITEMS:
                items, stack = stack, marks.pop()
                for i in range(0, len(items) - 1, 2):
                    _setitem(stack[-1], items[i], items[i + 1])
            elif op == _MARK:
                marks.append(stack)
                stack = []
            elif op == _TUPLE:
                items, stack = stack, marks.pop()
                stack.append(tuple(items))
            elif op == _TUPLE1:
                stack[-1] = (stack[-1],)
            elif op == _TUPLE2:
                stack[-2:] = [(stack[-2], stack[-1])]
            elif op == _TUPLE3:
                stack[-3:] = [(stack[-3], stack[-2], stack[-1])]
            elif op == _NONE:
                stack.append(None)
            elif op == _NEWTRUE:
                stack.append(True)
            elif op == _NEWFALSE:
                stack.append(False)
            elif op == _EMPTY_TUPLE:
                stack.append(())
            elif op == _EMPTY_LIST:
                stack.append([])
            elif op == _EMPTY_DICT:
                stack.append({})
            elif op == _BININT:
                stack.append(struct.unpack("<i", _exact(read, 4))[0])
            elif op == _BININT1:
                stack.append(_exact(read, 1)[0])
            elif op == _BININT2:
                stack.append(struct.unpack("<H", _exact(read, 2))[0])
            elif op == _LONG1:
                stack.append(int.from_bytes(_exact(read, _exact(read, 1)[0]), "little", signed=True))
            elif op == _BINFLOAT:
                stack.append(struct.unpack(">d", _exact(read, 8))[0])
            elif op == _BINUNICODE:
                n = struct.unpack("<I", _exact(read, 4))[0]
                if n > MAX_STRING:
                    raise Refused("a string of %d bytes" % n)
                stack.append(str(_exact(read, n), "utf-8", "surrogatepass"))
            elif op == _SHORT_BINSTRING:
                data = _exact(read, _exact(read, 1)[0])
                stack.append(data if self.encoding == "bytes" else data.decode(self.encoding, "strict"))
            elif op in (_BINGET, _LONG_BINGET):
                i = _exact(read, 1)[0] if op == _BINGET else struct.unpack("<I", _exact(read, 4))[0]
                if i not in self.memo:
                    raise Refused("memo entry %d was never put" % i)
                stack.append(self.memo[i])
            elif op in (_BINPUT, _LONG_BINPUT):
                i = _exact(read, 1)[0] if op == _BINPUT else struct.unpack("<I", _exact(read, 4))[0]
                if i not in self.memo and len(self.memo) >= MAX_MEMO:
                    raise Refused("more than %d memo entries" % MAX_MEMO)
                self.memo[i] = stack[-1]
            elif op == _PROTO:
                _exact(read, 1)
            elif op == _STOP:
                return stack.pop()
            else:
                raise Refused("Unsupported operand %d" % op[0])


def _setitem(d, k, v):
    if type(d) is not dict and type(d) is not OrderedDict:
        raise Refused("SETITEM on a %s" % type(d).__name__)
    if type(k) not in (str, int, float, bool, type(None), bytes):
        raise Refused("a dict key of type %s" % type(k).__name__)
    d[k] = v


def _exact(read, n):
    b = read(n)
    if len(b) != n:
        raise Refused("the pickle ends inside an opcode")
    return b


def _ascii(v):
    return v.decode("ascii") if type(v) is bytes else v
