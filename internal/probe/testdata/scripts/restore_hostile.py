"""`%vramguard restore` on files built to run code when loaded, in a bare
IPython shell with the notebook side loaded. Each case's file, if anything
in it runs, creates its own flag file (or, for TorchScript, prints its
marker on the process's stdout); prints one JSON line for the Go test
(TestRestoreHostile):

    {"cases": [{"name", "path", "fired", "stdout", "stderr", "ok"}]}

    restore_hostile.py DIR
"""

import json
import os
import struct
import sys

import shell_rig
import torch

work = sys.argv[1]
ip = shell_rig.shell()


def flag(name):
    return os.path.join(work, "fired-" + name)


def binunicode(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def exec_call(name):
    """GLOBAL builtins.exec, called with code that creates the case's flag."""
    return b"cbuiltins\nexec\n(" + binunicode("open(%r, 'w').close()" % flag(name)) + b"tR"


def zip_with(path, data_pkl):
    """A zip archive as torch.save writes it, its data.pkl replaced."""
    w = torch._C.PyTorchFileWriter(path)
    w.write_record("data.pkl", data_pkl, len(data_pkl))
    w.write_record("version", b"3\n", 2)
    w.write_end_of_file()
    del w


CASES = {}

# torch's legacy format starts with pickles (magic number, protocol,
# system info) that torch.load reads with the pickle module it is given.
# A float first makes torch 1.x's weights-only reader fail with
# "Unsupported operand"; a protocol-4 opcode does the same on any torch.
CASES["legacy, a float first"] = b"\x80\x02G" + struct.pack(">d", 1.0) + b"0" + exec_call("legacy-float") + b"."
CASES["legacy, a protocol 4 opcode first"] = b"\x80\x04\x8c\x01a0" + exec_call("legacy-proto4") + b"."
# The zip format: data.pkl with a float before the call.
CASES["zip, a float then a call"] = ("zip", b"\x80\x02G" + struct.pack(">d", 1.0) + b"0" + exec_call("zip-float") + b".")
CASES["zip, a float in a dict, then a call"] = ("zip", b"\x80\x02}(X\x01\x00\x00\x00aG" + struct.pack(">d", 0.5) +
                                                b"X\x01\x00\x00\x00b" + exec_call("zip-dict") + b"u.")

TS_MARKER = "TORCHSCRIPT-SETSTATE-RAN"


class Scripted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.x = 1

    @torch.jit.export
    def __getstate__(self):
        return (self.x, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[int, bool]):
        print("TORCHSCRIPT-SETSTATE-RAN")
        self.x = state[0]
        self.training = state[1]

    def forward(self, a):
        return a


paths = {}
for name, body in CASES.items():
    p = os.path.join(work, name.replace(" ", "_").replace(",", "") + ".pt")
    if isinstance(body, tuple):
        zip_with(p, body[1])
    else:
        with open(p, "wb") as f:
            f.write(body)
    paths[name] = p
ts = os.path.join(work, "torchscript.pt")
torch.jit.save(torch.jit.script(Scripted()), ts)
paths["TorchScript archive with a __setstate__"] = ts

# A real autosave cut short, and one with an optimizer (floats: the
# fallback reader) that must still load.
model = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
model(torch.ones(1, 4)).sum().backward()
opt.step()
good = os.path.join(work, "autosave-20260101-000000-1.pt")
torch.save({"vramguard_autosave": 1, "saved_at": 1767225600, "objects": {"model": model.state_dict(),
                                                                         "opt": opt.state_dict()}}, good)
with open(good, "rb") as f:
    data = f.read()
cut = os.path.join(work, "truncated.pt")
with open(cut, "wb") as f:
    f.write(data[: len(data) // 2])
paths["a truncated autosave"] = cut

ip.run_cell("%load_ext vramguard")
ip.user_ns["model"] = torch.nn.Linear(4, 2)
ip.user_ns["opt"] = torch.optim.Adam(ip.user_ns["model"].parameters(), lr=0.5)


def cell(src):
    r, out, err = shell_rig.captured(ip, src)
    return {"stdout": out, "stderr": err, "ok": bool(r.success)}


cases = []
for name, p in paths.items():
    rec = cell("%%vramguard restore %s" % p)
    slug = {"legacy, a float first": "legacy-float", "legacy, a protocol 4 opcode first": "legacy-proto4",
            "zip, a float then a call": "zip-float", "zip, a float in a dict, then a call": "zip-dict"}.get(name)
    rec.update(name=name, path=p, fired=bool(slug) and os.path.exists(flag(slug)))
    cases.append(rec)
sys.stdout.flush()
good_rec = cell("%%vramguard restore %s" % good)
good_rec["same"] = all(torch.equal(a, b) for a, b in zip(ip.user_ns["model"].state_dict().values(),
                                                        model.state_dict().values()))
good_rec["lr"] = ip.user_ns["opt"].param_groups[0]["lr"]
print(json.dumps({"cases": cases, "good": good_rec, "marker": TS_MARKER}))
