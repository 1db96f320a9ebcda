#!/usr/bin/python3
"""Write the checkpoint fixtures of internal/ckpt/testdata with real PyTorch.

Run with Debian's PyTorch (python3-torch):

    /usr/bin/python3 scripts/gen-ckpt-fixtures.py [OUTDIR]

OUTDIR defaults to internal/ckpt/testdata/torch. Besides the checkpoints it
writes expected.json: for each fixture the format, and the tensors (path,
dtype, shape, bytes), unique storage bytes and scalars as torch itself sees
them after torch.load. The Go tests compare their own reading against it.

Malicious pickles go to OUTDIR/../malicious; they are written with pickle's
own opcodes or by hand and are never loaded here. Their payloads would
create MARKER; the Go tests check that it never appears.

Safetensors files are written by a small writer that follows the published
format (8-byte little-endian header length, JSON header, raw little-endian
bytes) because Debian does not package the safetensors library.
"""
import collections
import io
import json
import os
import pickle
import shutil
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

MARKER = "/tmp/vramguard-ckpt-fixture-pwned"

torch.manual_seed(0)

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "internal", "ckpt", "testdata", "torch")
OUT = os.path.abspath(OUT)
MAL = os.path.join(os.path.dirname(OUT), "malicious")

DTYPES = {
    torch.float64: "float64", torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.complex128: "complex128", torch.complex64: "complex64", torch.complex32: "complex32",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
    torch.uint8: "uint8", torch.bool: "bool",
    torch.qint8: "qint8", torch.quint8: "quint8", torch.qint32: "qint32", torch.quint4x2: "quint4x2",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(36, 10)
        self.head = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 3))

    def forward(self, x):
        x = self.bn(self.conv(x)).relu().flatten(1)
        return self.head(self.fc(x))


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.out = nn.Linear(8, 16, bias=False)
        self.out.weight = self.embed.weight  # tied


def join(p, k):
    return k if p == "" else p + "." + k


def key_str(k):
    if isinstance(k, bool):
        return "True" if k else "False"
    if isinstance(k, tuple):
        return "(" + ",".join(key_str(e) for e in k) + ")"
    return str(k)


def describe(obj):
    """Tensors, scalars and unique storage bytes of a loaded object, named
    the way vramguard names them."""
    tensors, scalars, storages = [], {}, {}

    def tensor(p, t):
        if t.is_quantized:
            st = t.storage()
            key = st.data_ptr()
            nbytes = st.size() * st.element_size()
        else:
            st = t.storage()
            key = st.data_ptr() if st.size() else id(st)
            nbytes = st.size() * st.element_size()
        storages[key] = max(storages.get(key, 0), nbytes)
        tensors.append({"path": p, "dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "bytes": t.numel() * t.element_size()})

    def walk(v, p):
        if isinstance(v, torch.Tensor):
            tensor(p, v)
        elif isinstance(v, np.ndarray):
            tensors.append({"path": p, "dtype": str(v.dtype), "shape": list(v.shape), "bytes": v.nbytes})
        elif isinstance(v, np.generic):
            scalars[p] = v.item()
        elif isinstance(v, nn.Module):
            for k, t in v.state_dict(keep_vars=True).items():
                tensor(join(p, k), t)
        elif isinstance(v, bool) or isinstance(v, (int, float, str)):
            scalars[p if p else "."] = v
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, join(p, key_str(k)))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, join(p, str(i)))

    walk(obj, "")
    return tensors, scalars, sum(storages.values())


expected = {}


def record(name, fmt, obj, layout=None, extra=None):
    tensors, scalars, sb = describe(obj)
    e = {"format": fmt, "tensors": tensors, "scalars": scalars, "storage_bytes": sb}
    if layout:
        e["layout"] = layout
    if extra:
        e.update(extra)
    expected[name] = e


def save(name, obj, layout=None, **kw):
    path = os.path.join(OUT, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(obj, path, **kw)
    loaded = torch.load(path, map_location="cpu")
    fmt = "torch-legacy" if kw.get("_use_new_zipfile_serialization") is False else "torch-zip"
    record(name, fmt, loaded, layout)


ST_CODES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
            torch.bool: "BOOL"}


def tensor_bytes(t):
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": ST_CODES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(3):
        loss = net(torch.randn(2, 1, 5, 5)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()

    # 1. a plain state_dict
    save("state_dict.pt", net.state_dict(), layout="state_dict")
    # 2. a full training checkpoint
    save("training.pt", {
        "epoch": 7, "step": 1400, "loss": 0.3125, "best_acc": 0.875, "arch": "Net",
        "model_state_dict": net.state_dict(), "optimizer_state_dict": opt.state_dict(),
        "scheduler_state_dict": sched.state_dict(), "metrics": {"val_loss": 0.5, "val_acc": 0.75},
    }, layout="training")
    # 3. the legacy (pre-1.6) format
    save("legacy.pt", {"epoch": 2, "model": net.state_dict()}, _use_new_zipfile_serialization=False)
    # 4. every dtype torch can save
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    dt = {DTYPES[d]: base.to(d) for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)}
    dt["complex64"] = torch.complex(base, base)
    dt["complex128"] = torch.complex(base.double(), base.double())
    dt["bool"] = base > 0.5
    dt["qint8"] = torch.quantize_per_tensor(base, 0.1, 0, torch.qint8)
    dt["quint8"] = torch.quantize_per_tensor(base, 0.1, 0, torch.quint8)
    dt["qint32"] = torch.quantize_per_tensor(base, 0.1, 0, torch.qint32)
    dt["quint4x2"] = torch.quantize_per_tensor(torch.rand(4, 4), 0.1, 0, torch.quint4x2)
    save("dtypes.pt", dt)
    save("dtypes_legacy.pt", {k: v for k, v in dt.items() if not v.is_quantized}, _use_new_zipfile_serialization=False)
    # 5. views and tied weights
    t = torch.arange(100, dtype=torch.float32)
    tied = TiedLM()
    save("views.pt", {"full": t, "slice": t[10:20], "strided": t.view(10, 10)[:, 2], "matrix": t.view(10, 10),
                      "tied": tied.state_dict(), "again": t, "empty": torch.empty(0, 3), "scalar": torch.tensor(3.5)})
    # 6. nested containers
    save("nested.pt", {"a": [torch.ones(2), (torch.zeros(3, dtype=torch.int64), {"deep": {"x": torch.ones(1, 1)}})],
                       "b": collections.OrderedDict(k=torch.ones(4, dtype=torch.float16)), 7: "seven",
                       "flags": [True, False], "cfg": {"lr": 0.01, "name": "run-1", "layers": [64, 32]}})
    # 6b. numpy arrays and scalars next to tensors
    save("numpy.pt", {"arr": np.arange(6, dtype=np.float32).reshape(2, 3), "ids": np.array([1, 2, 3]),
                      "best": np.float64(0.125), "count": np.int64(9), "w": torch.ones(2)})
    # 7. a whole pickled nn.Module
    save("module.pt", net, layout="module")
    # 8. Lightning-style .ckpt
    save("lightning.ckpt", {
        "epoch": 4, "global_step": 800, "pytorch-lightning_version": "2.1.0",
        "state_dict": {"model." + k: v for k, v in net.state_dict().items()},
        "optimizer_states": [opt.state_dict()], "lr_schedulers": [sched.state_dict()],
        "callbacks": {"ModelCheckpoint{'monitor': 'val_loss'}": {"best_model_score": torch.tensor(0.25), "monitor": "val_loss"}},
        "loops": {"fit_loop": {"epoch_progress": {"current": {"completed": 4}}}},
        "hyper_parameters": {"lr": 0.001, "hidden": 36},
    }, layout="lightning")
    # 9. safetensors
    st_tensors = {k: v for k, v in net.state_dict().items()}
    st_tensors["extra.bf16"] = torch.ones(3, 2, dtype=torch.bfloat16)
    st_tensors["extra.bool"] = torch.tensor([True, False])
    st_tensors["extra.scalar"] = torch.tensor(5, dtype=torch.int64)
    write_safetensors(os.path.join(OUT, "model.safetensors"), st_tensors, {"format": "pt"})
    record("model.safetensors", "safetensors", st_tensors)
    # 10. HF Trainer checkpoint-N
    hf = os.path.join(OUT, "hf", "checkpoint-500")
    write_safetensors(os.path.join(hf, "model.safetensors"), dict(net.state_dict()), {"format": "pt"})
    torch.save(opt.state_dict(), os.path.join(hf, "optimizer.pt"))
    torch.save(sched.state_dict(), os.path.join(hf, "scheduler.pt"))
    torch.save({"python": 1, "cpu": torch.get_rng_state()}, os.path.join(hf, "rng_state.pth"))
    with open(os.path.join(hf, "trainer_state.json"), "w") as f:
        json.dump({"global_step": 500, "epoch": 2.0, "best_metric": 0.41, "best_model_checkpoint": hf,
                   "log_history": [{"loss": 0.9, "step": 250, "epoch": 1.0}, {"eval_loss": 0.41, "step": 500, "epoch": 2.0}]}, f)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump({"model_type": "net"}, f)
    expected["hf/checkpoint-500"] = {"format": "hf-trainer", "step": 500, "epoch": 2}
    # 11. a torch.distributed.checkpoint directory (layout of torch >= 2.0)
    write_dcp(os.path.join(OUT, "dcp", "step-300"), net, step=300)
    # 12. plain pickles
    with open(os.path.join(OUT, "plain4.pkl"), "wb") as f:
        pickle.dump({"epoch": 3, "lr": 0.1, "name": "x", "hist": [1.5, 2.5]}, f, protocol=4)
    with open(os.path.join(OUT, "plain0.pkl"), "wb") as f:
        pickle.dump({"epoch": 3, "lr": 0.1, "name": "x", "hist": [1.5, 2.5]}, f, protocol=0)
    for n in ("plain4.pkl", "plain0.pkl"):
        expected[n] = {"format": "pickle", "tensors": [], "storage_bytes": 0,
                       "scalars": {"epoch": 3, "lr": 0.1, "name": "x", "hist.0": 1.5, "hist.1": 2.5}}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    write_malicious()


def write_dcp(d, net, step):
    """Write a DCP directory the way torch>=2.0's FileSystemWriter does:
    each item torch.save'd at an offset of __0_0.distcp, then .metadata
    (a pickled Metadata dataclass) renamed into place last. Debian's torch
    1.13 has no torch.distributed.checkpoint, so the dataclasses are declared
    here under the module names torch 2.x pickles them with."""
    import dataclasses
    import types
    mods = {}
    for name in ("torch.distributed.checkpoint", "torch.distributed.checkpoint.metadata",
                 "torch.distributed.checkpoint.filesystem"):
        mods[name] = sys.modules.get(name) or types.ModuleType(name)
        sys.modules[name] = mods[name]
    M = mods["torch.distributed.checkpoint.metadata"]
    F = mods["torch.distributed.checkpoint.filesystem"]

    def dc(mod, name, fields, frozen=False):
        cls = dataclasses.make_dataclass(name, fields, frozen=frozen)
        cls.__module__ = mod.__name__
        setattr(mod, name, cls)
        return cls

    ChunkStorageMetadata = dc(M, "ChunkStorageMetadata", ["offsets", "sizes"])
    TensorProperties = dc(M, "TensorProperties", ["dtype", "layout", "requires_grad", "memory_format", "pin_memory"])
    TensorStorageMetadata = dc(M, "TensorStorageMetadata", ["properties", "size", "chunks"])
    BytesStorageMetadata = dc(M, "BytesStorageMetadata", [])
    MetadataIndex = dc(M, "MetadataIndex", ["fqn", "offset", "index"], frozen=True)
    Metadata = dc(M, "Metadata", ["state_dict_metadata", "planner_data", "storage_data"])
    StorageInfo = dc(F, "_StorageInfo", ["relative_path", "offset", "length"])

    os.makedirs(d, exist_ok=True)
    sdm, storage, buf = {}, {}, io.BytesIO()
    items = {"model." + k: v for k, v in net.state_dict().items()}
    items["step"] = step
    items["epoch"] = 3
    for fqn, v in items.items():
        off = buf.tell()
        torch.save(v, buf)
        length = buf.tell() - off
        if isinstance(v, torch.Tensor):
            sdm[fqn] = TensorStorageMetadata(
                TensorProperties(v.dtype, torch.strided, False, torch.contiguous_format, False),
                v.size(), [ChunkStorageMetadata(torch.Size([0] * v.dim()), v.size())])
            idx = MetadataIndex(fqn, torch.Size([0] * v.dim()), 0)
        else:
            sdm[fqn] = BytesStorageMetadata()
            idx = MetadataIndex(fqn, None, None)
        storage[idx] = StorageInfo("__0_0.distcp", off, length)
    with open(os.path.join(d, "__0_0.distcp"), "wb") as f:
        f.write(buf.getvalue())
    with open(os.path.join(d, ".metadata"), "wb") as f:
        pickle.dump(Metadata(sdm, None, storage), f)
    tensors, _, _ = describe({k: v for k, v in items.items() if isinstance(v, torch.Tensor)})
    expected[os.path.relpath(d, OUT)] = {"format": "dcp", "tensors": tensors, "step": step, "epoch": 3}
    for name in mods:
        del sys.modules[name]


class Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def write_malicious():
    """Pickles that would run code if loaded with pickle/torch.load."""
    if os.path.exists(MAL):
        shutil.rmtree(MAL)
    os.makedirs(MAL)
    import subprocess
    cmd = "touch " + MARKER
    files = {}
    files["os_system.pkl"] = pickle.dumps(Reduce(os.system, (cmd,)), protocol=2)
    files["eval_p4.pkl"] = pickle.dumps(Reduce(eval, ("__import__('os').system(%r)" % cmd,)), protocol=4)
    files["popen_p0.pkl"] = pickle.dumps(Reduce(subprocess.Popen, (["touch", MARKER],)), protocol=0)
    files["exec_p5.pkl"] = pickle.dumps(Reduce(exec, ("open(%r,'w')" % MARKER,)), protocol=5)
    # STACK_GLOBAL whose module/name strings come from the memo.
    files["memo_stack_global.pkl"] = (
        b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93\x94" +
        b"\x8c" + bytes([len(cmd)]) + cmd.encode() + b"\x85R.")
    # getattr(__import__('os'), 'system')(cmd), all through builtins.
    files["getattr_import.pkl"] = (
        b"\x80\x02cbuiltins\ngetattr\ncbuiltins\n__import__\nX\x02\x00\x00\x00os\x85RX\x06\x00\x00\x00system\x86R"
        b"X" + struct.pack("<I", len(cmd)) + cmd.encode() + b"\x85R.")
    # A benign pickle followed by a malicious one (scanners that stop at the first STOP miss it).
    files["second_pickle.pkl"] = pickle.dumps({"epoch": 1}, protocol=2) + pickle.dumps(Reduce(os.system, (cmd,)), protocol=2)
    # The dangerous call comes before a deliberately broken opcode stream.
    files["broken_after.pkl"] = pickle.dumps(Reduce(os.system, (cmd,)), protocol=2)[:-1] + b"\xff\xff"
    # STACK_GLOBAL whose operands are not strings (cannot be resolved statically).
    files["unresolvable.pkl"] = b"\x80\x04K\x01K\x02\x93)R."
    # Lookalike modules that picklescan-style denylists missed.
    files["runpy.pkl"] = pickle.dumps(Reduce(__import__("runpy")._run_code, ("import os", {})), protocol=2)
    files["pydoc_locate.pkl"] = b"\x80\x02cpydoc\nlocate\nX\x09\x00\x00\x00os.systemq\x00\x85R."
    files["operator_attrgetter.pkl"] = b"\x80\x02c_operator\nattrgetter\nX\x06\x00\x00\x00systemq\x00\x85R."
    files["torch_hub_load.pkl"] = b"\x80\x02ctorch.hub\nload\nX\x04\x00\x00\x00evilq\x00X\x01\x00\x00\x00mq\x01\x86R."
    files["bdb_run.pkl"] = b"\x80\x02cbdb\nBdb\n)\x81q\x00."
    files["ext_registry.pkl"] = b"\x80\x02\x82\x01)R."
    files["posix_nt.pkl"] = b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00idq\x00\x85R."
    for name, data in files.items():
        with open(os.path.join(MAL, name), "wb") as f:
            f.write(data)
    # A real torch checkpoint whose pickle carries a payload, saved with a
    # .safetensors name to show detection ignores names.
    torch.save({"epoch": 1, "w": torch.ones(2), "hook": Reduce(os.system, (cmd,))}, os.path.join(MAL, "torch_payload.safetensors"))
    # The same, with a data record's CRC damaged: scan must still see it.
    data = bytearray(open(os.path.join(MAL, "torch_payload.safetensors"), "rb").read())
    i = data.find(b"\x00\x00\x80\x3f")  # the first 1.0f of w
    data[i + 3] ^= 0x01
    with open(os.path.join(MAL, "torch_payload_badcrc.pt"), "wb") as f:
        f.write(bytes(data))
    # A benign checkpoint, for the allowlist.
    torch.save({"epoch": 1, "model": torch.nn.Linear(2, 2).state_dict()}, os.path.join(MAL, "benign.pt"))


if __name__ == "__main__":
    main()
