#!/usr/bin/python3
"""Write the scan fixtures of issue #25 into internal/ckpt/testdata/edges.

Run with Debian's numpy and PyTorch:

    /usr/bin/python3 scripts/gen-edge-fixtures.py [OUTDIR]

- attack_*: files whose payload a real loader runs (numpy.load with
  allow_pickle=True, torch.load, pickle.load of a decompressed stream:
  gzip, bz2, zlib, lzma and Debian's python3-zstandard, as pandas reads
  zstd).
  Every payload creates PWNED ("vg-pwned") in the current directory; the Go
  tests load each with the real loader in a temp dir and check that it
  appears, and check that `ckpt scan` fails on each. They are written byte
  by byte here and never loaded by this script.
- benign_*: files written by the real library that scan must pass.
"""
import bz2
import gzip
import io
import lzma
import os
import struct
import sys
import zipfile
import zlib

import numpy as np
import torch
import zstandard

PWNED = "vg-pwned"
CMD = "touch " + PWNED
# os.system(CMD) in protocol 0 opcodes.
PAYLOAD = b"cos\nsystem\n(S'" + CMD.encode() + b"'\ntR."

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "internal", "ckpt", "testdata", "edges")
OUT = os.path.abspath(OUT)


def npy_header(descr, shape=(1,), version=(1, 0)):
    """The bytes numpy.save writes before the data of an array of descr."""
    f = io.BytesIO()
    d = {"descr": descr, "fortran_order": False, "shape": shape}
    if version == (1, 0):
        np.lib.format.write_array_header_1_0(f, d)
    else:
        np.lib.format.write_array_header_2_0(f, d)
    return f.getvalue()


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def npz(name, members):
    """A zip like numpy.savez writes, members (name, bytes, compress)."""
    with zipfile.ZipFile(os.path.join(OUT, name), "w") as z:
        for m, data, deflate in members:
            z.writestr(zipfile.ZipInfo(m), data,
                       compress_type=zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)


def main():
    os.makedirs(OUT, exist_ok=True)
    # Benign: numpy's own writers.
    np.save(os.path.join(OUT, "benign_int.npy"), np.arange(12, dtype=np.int64).reshape(3, 4))
    np.save(os.path.join(OUT, "benign_struct.npy"),
            np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,)), ("c", "S3")]))
    np.save(os.path.join(OUT, "benign_datetime.npy"), np.array(["2026-01-01"], dtype="M8[D]"))
    obj = np.empty(3, dtype=object)
    obj[:] = [1, "two", 3.0]
    np.save(os.path.join(OUT, "benign_object.npy"), obj, allow_pickle=True)
    np.savez(os.path.join(OUT, "benign_arrays.npz"), a=np.arange(5), b=np.ones((2, 2)))
    np.savez_compressed(os.path.join(OUT, "benign_compressed.npz"), a=np.arange(5), obj=obj)
    # Attacks: an object array's pickle is the payload.
    write("attack_object.npy", npy_header("|O") + PAYLOAD)
    write("attack_object_v2.npy", npy_header("|O", version=(2, 0)) + PAYLOAD)
    write("attack_struct_object.npy", npy_header([("a", "<i8"), ("b", "|O")]) + PAYLOAD)
    evil = npy_header("|O") + PAYLOAD
    with open(os.path.join(OUT, "benign_int.npy"), "rb") as f:
        plain = f.read()
    npz("attack_stored.npz", [("a.npy", plain, False), ("b.npy", evil, False)])
    npz("attack_deflated.npz", [("b.npy", evil, True)])
    # numpy reads a member by its full name too: no .npy suffix needed.
    npz("attack_noext.npz", [("weights", evil, True)])
    lightning_run()
    overflow_storage()
    build_side_effect()
    build_pid_side_effect()
    compressed_pickles()


def lightning_ckpt(epoch, step, best):
    """A Lightning-style checkpoint: ModelCheckpoint records best_model_path."""
    torch.manual_seed(step)
    model = torch.nn.Linear(4, 2)
    cb = "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min'}"
    return {"epoch": epoch, "global_step": step, "pytorch-lightning_version": "2.1.0",
            "state_dict": model.state_dict(), "optimizer_states": [], "lr_schedulers": [],
            "callbacks": {cb: {"monitor": "val_loss", "best_model_score": torch.tensor(0.25),
                               "best_model_path": best, "last_model_path": ""}},
            "loops": {}, "hyper_parameters": {}}


def lightning_run():
    """lightning/: a run whose best checkpoint (epoch 0) is its oldest, as
    ModelCheckpoint(save_top_k=-1, monitor="val_loss") leaves it when the
    loss rose after the first epoch; best_model_path is absolute, as
    Lightning writes it, on the machine that trained."""
    d = os.path.join(OUT, "lightning")
    os.makedirs(d, exist_ok=True)
    best = "/home/user/proj/lightning_logs/version_0/checkpoints/epoch=0-step=100.ckpt"
    for epoch in range(3):
        step = 100 * (epoch + 1)
        torch.save(lightning_ckpt(epoch, step, best), os.path.join(d, f"epoch={epoch}-step={step}.ckpt"))
        t = 1_750_000_000 + step
        os.utime(os.path.join(d, f"epoch={epoch}-step={step}.ckpt"), (t, t))


class _Storage:
    """Pickled as the persistent id of a storage record, as torch.save does."""


class _Tensor:
    def __init__(self, shape):
        self.shape = shape

    def __reduce__(self):
        import collections
        return (torch._utils._rebuild_tensor_v2,
                (_Storage(), 0, self.shape, (1,) * len(self.shape), False, collections.OrderedDict()))


def torch_zip_with_numel(path, numel, record_bytes, shape):
    """A torch zip whose one FloatStorage claims numel elements while its
    record holds record_bytes bytes, the rest written as torch.save does."""
    import pickle

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, _Storage):
                return ("storage", torch.FloatStorage, "0", "cpu", numel)
            return None

    buf = io.BytesIO()
    P(buf, protocol=2).dump({"weight": _Tensor(shape)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/data/0", b"\0" * record_bytes)
        z.writestr("archive/version", "3\n")


def overflow_storage():
    """attack_numel_overflow.pt: 2**62 + 4 float32 elements are 2**64 + 16
    bytes, 16 once wrapped to 64 bits: a reader that multiplies without a
    check finds the 16-byte record the right size. benign_numel.pt is the
    same file with the honest count 4."""
    torch_zip_with_numel(os.path.join(OUT, "attack_numel_overflow.pt"), 2**62 + 4, 16, (4,))
    torch_zip_with_numel(os.path.join(OUT, "benign_numel.pt"), 4, 16, (4,))


def binunicode(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def build_side_effect():
    """attack_build_patch.pt, a legacy torch file whose every global is on
    the allowlist (torch.nn.functional.relu): BUILD on the function sets
    relu.dump_patches = True, then a ("module", relu, file, source)
    persistent id makes torch's legacy loader compare sources and, as they
    differ, write relu.patch into the working directory."""
    relu = b"ctorch.nn.functional\nrelu\n"
    main = (b"\x80\x02" + relu + b"N}" + binunicode("dump_patches") + b"\x88s\x86b0"
            + b"(" + binunicode("module") + relu + binunicode("evil.py") + binunicode("not relu's source")
            + b"tQ.")
    legacy_file("attack_build_patch.pt", main)


def legacy_file(name, main):
    """A legacy (non-zip) torch file around the pickle main: magic,
    protocol, sys_info as torch.save writes them, no storages."""
    import pickle
    sys_info = dict(protocol_version=1001, little_endian=True, type_sizes=dict(short=2, int=4, long=4))
    with open(os.path.join(OUT, name), "wb") as f:
        for part in (0x1950a86a20f9469cfc6c, 1001, sys_info):
            f.write(pickle.dumps(part, protocol=2))
        f.write(main)
        f.write(pickle.dumps([], protocol=2))


def build_pid_side_effect():
    """attack_pid_patch.pt: the same patch file without a BUILD on a global.
    A first ("module", relu, "", "") record (no source: torch checks
    nothing) makes persistent_load return relu itself; BUILD on that sets
    relu.dump_patches = True; a second record whose source differs makes
    torch's legacy loader write relu.patch. Every global is allowlisted."""
    relu = b"ctorch.nn.functional\nrelu\n"
    record = lambda src: (b"(" + binunicode("module") + relu + binunicode("evil.py" if src else "")
                          + binunicode(src) + b"tQ")
    main = (b"\x80\x02" + record("") + b"N}" + binunicode("dump_patches") + b"\x88s\x86b0"
            + record("not relu's source") + b".")
    legacy_file("attack_pid_patch.pt", main)


def compressed_pickles():
    """Pickles compressed as pickle.load(gzip.open(...)), joblib and pandas
    read them, each by Python's own compressor: attack_pickle.* hold the
    payload (gzip, bz2, zlib, xz, the legacy .lzma format, zstd);
    attack_split.xz splits it across two xz streams, which lzma.open reads
    as one; attack_skippable.zst puts a zstd skippable frame before it;
    attack_alone.xz is lzma's legacy format starting with byte 0x00, and
    attack_empty_first.lzma puts an empty stream of zero bytes before it;
    benign_pickle.xz/.zst/.lzma and benign_sha256.xz hold a plain dict,
    and bigdict.xz too, in a block declaring a 4 GiB dictionary; bomb.* hold
    a valid pickle of 65 MiB of zero bytes (past the scanner's 64 MiB
    bound) in a few KB."""
    import pickle
    zst = zstandard.ZstdCompressor()
    gz = lambda b: gzip.compress(b, mtime=0)  # the same bytes on every run
    for ext, comp in (("gz", gz), ("bz2", bz2.compress), ("zlib", zlib.compress),
                      ("xz", lzma.compress), ("lzma", lambda b: lzma.compress(b, format=lzma.FORMAT_ALONE)),
                      ("zst", zst.compress)):
        write("attack_pickle." + ext, comp(PAYLOAD))
    # A zstd skippable frame first (magic 0x184D2A5F: its first byte is no
    # pickle opcode), which zstandard.open skips to the payload's frame.
    write("attack_skippable.zst", struct.pack("<II", 0x184D2A5F, 4) + b"skip" + zst.compress(PAYLOAD))
    # lzma's legacy format has no magic: lzma.open takes any file without
    # xz's as one when liblzma's header checks pass. With lc=lp=pb=0 its
    # first byte is 0x00, no pickle opcode; pandas opens a .xz name with
    # lzma.open.
    write("attack_alone.xz", lzma.compress(PAYLOAD, format=lzma.FORMAT_ALONE,
                                           filters=[{"id": lzma.FILTER_LZMA1, "lc": 0, "lp": 0, "pb": 0}]))
    # An empty lzma-alone stream (18 zero bytes: header, size 0, the range
    # coder's 5 bytes) before the payload's stream: lzma.open reads both.
    write("attack_empty_first.lzma", bytes(18) + lzma.compress(PAYLOAD, format=lzma.FORMAT_ALONE))
    half = len(PAYLOAD) // 2
    write("attack_split.xz", lzma.compress(PAYLOAD[:half]) + lzma.compress(PAYLOAD[half:]))
    plain = pickle.dumps({"lr": 0.1, "steps": [1, 2, 3], "name": "run"}, protocol=4)
    write("benign_pickle.xz", lzma.compress(plain))
    write("benign_pickle.zst", zst.compress(plain))
    write("benign_pickle.lzma", lzma.compress(plain, format=lzma.FORMAT_ALONE))
    write("benign_sha256.xz", lzma.compress(plain, check=lzma.CHECK_SHA256))
    # bigdict.xz: the harmless dict in an xz block whose header declares a
    # 4 GiB dictionary (code 40, its CRC recomputed), which lzma.open
    # reads and the scanner refuses to allocate.
    x = bytearray(lzma.compress(plain, filters=[{"id": lzma.FILTER_LZMA2, "dict_size": 4096}]))
    hsize = (x[12] + 1) * 4
    hdr = x[12:12 + hsize]
    assert hdr[1] == 0 and hdr[2] == 0x21 and hdr[3] == 1  # no sizes; LZMA2, one property byte
    hdr[4] = 40
    hdr[-4:] = struct.pack("<I", zlib.crc32(bytes(hdr[:-4])))
    x[12:12 + hsize] = hdr
    write("bigdict.xz", bytes(x))
    big = pickle.dumps(bytes(65 << 20), protocol=4)
    for ext, comp in (("xz", lzma.compress), ("zst", zst.compress), ("gz", gz)):
        write("bomb." + ext, comp(big))


if __name__ == "__main__":
    main()
