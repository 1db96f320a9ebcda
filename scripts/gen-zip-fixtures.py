#!/usr/bin/python3
"""Write the zip-level attack fixtures of internal/ckpt/testdata/zipattack.

    /usr/bin/python3 scripts/gen-zip-fixtures.py [OUTDIR]

Every fixture starts from a real torch.save archive (Debian's python3-torch)
and rewrites its zip headers with the small writer below, so that torch's
zip reader (miniz, in caffe2's PyTorchStreamReader) and a stricter or
streaming zip reader see different things. Payloads run
`touch vramguard-zip-pwned` in the current directory (os.system), so a test
can prove a fixture dangerous by running torch.load in a temp dir.

    local_name.pt     data.pkl's local header names another record (same length)
    case_name.pt      the pickle is stored as DATA.PKL (torch looks names up ignoring case), protocol 0
    disk1.pt          the end record says "disk 1 of 1"; version comes first, data.pkl after it
    eocd_comment.pt   two end records: the last one (torch's) has a comment length that overruns the file,
                      a strict reader takes the earlier one, whose directory holds a benign data.pkl
    cd_after.pt       data.pkl's directory entry points past the central directory; a benign data.pkl
                      sits at offset 0 where no directory entry points
    stored_size.pt    stored data.pkl whose compressed size (what a strict reader reads) is a benign
                      prefix; torch reads the uncompressed size, which holds the payload
    deflated_big.pt   deflated data.pkl of 257 MiB: the payload, then zeros (over a 256 MiB cap)
    local_sizes.pt    benign; data.pkl's local header gives other sizes than the directory (no payload)
    bomb_overlap.pt   40 directory entries share one 250 MiB deflated stream of zeros (zip bomb)
    bomb_single.pt    benign data.pkl followed by 250 MiB of zeros, deflated (one large record)
"""
import io
import os
import pickle
import struct
import sys
import zipfile
import zlib

import torch

MARKER = "vramguard-zip-pwned"
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "internal", "ckpt", "testdata", "zipattack")
DOS_TIME, DOS_DATE = 0x6000, 0x5B81  # 12:00:00, 2025-12-01

# GLOBAL os system; BINUNICODE cmd; TUPLE1; REDUCE; STOP
PAYLOAD2 = b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len("touch " + MARKER)) + b"touch " + MARKER.encode() + b"\x85R."
# protocol 0: GLOBAL os system; MARK; STRING; TUPLE; REDUCE; STOP
PAYLOAD0 = b"cos\nsystem\n(S'touch " + MARKER.encode() + b"'\ntR."


def torch_records():
    """The records of a real torch.save archive, in order."""
    buf = io.BytesIO()
    torch.save({"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": 7}, buf)
    z = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def deflate(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


class Rec:
    def __init__(self, name, data, method=0, comp=None, local_name=None, flags=0x0800, csize=None, usize=None,
                 local_csize=None, local_usize=None, time=0):
        self.name, self.data, self.method = name, data, method
        self.comp = comp if comp is not None else (deflate(data) if method == 8 else data)
        self.local_name = local_name or name
        self.flags, self.time = flags, time
        self.crc = zlib.crc32(data)
        self.csize = len(self.comp) if csize is None else csize
        self.usize = len(data) if usize is None else usize
        self.local_csize = self.csize if local_csize is None else local_csize
        self.local_usize = self.usize if local_usize is None else local_usize
        self.offset = None


def local_header(r):
    n = r.local_name.encode()
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, r.flags, r.method, r.time, DOS_DATE, r.crc,
                       r.local_csize, r.local_usize, len(n), 0) + n


def central(r, disk=0):
    n = r.name.encode()
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, r.flags, r.method, r.time, DOS_DATE, r.crc,
                       r.csize, r.usize, len(n), 0, 0, disk, 0, 0, r.offset) + n


def eocd(count, cd_size, cd_off, disk=0, comment_len=0):
    return struct.pack("<IHHHHIIH", 0x06054B50, disk, disk, count, count, cd_size, cd_off, comment_len)


def write_records(out, recs):
    for r in recs:
        r.offset = len(out)
        out += local_header(r) + r.comp


def directory(recs, disk=0):
    return b"".join(central(r, disk) for r in recs)


def simple_zip(recs, disk=0):
    out = bytearray()
    write_records(out, recs)
    cd_off = len(out)
    cd = directory(recs, disk)
    return bytes(out + cd + eocd(len(recs), len(cd), cd_off, disk))


def base_recs(pkl=None, pkl_name="data.pkl", **kw):
    """Rec objects for the real torch records, data.pkl replaced by pkl."""
    recs = []
    for name, data in torch_records():
        root = name.split("/")[0]
        if name.endswith("/data.pkl"):
            recs.append(Rec(root + "/" + pkl_name, data if pkl is None else pkl, **kw))
        else:
            recs.append(Rec(name, data))
    return recs


def move_first(recs, suffix):
    i = next(i for i, r in enumerate(recs) if r.name.endswith(suffix))
    return [recs[i]] + recs[:i] + recs[i + 1:]


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {}
    # 1. data.pkl's local header names data.pkX.
    recs = base_recs(PAYLOAD2)
    for r in recs:
        if r.name.endswith("/data.pkl"):
            r.local_name = r.name[:-1] + "X"
    files["local_name.pt"] = simple_zip(recs)
    # 2. data.pkl stored as DATA.PKL, protocol 0 (no PROTO opcode at its start).
    files["case_name.pt"] = simple_zip(move_first(base_recs(PAYLOAD0, pkl_name="DATA.PKL"), "/version"))
    # 3. "disk 1 of 1": version first, so the first local record is not the pickle.
    files["disk1.pt"] = simple_zip(move_first(base_recs(PAYLOAD2), "/version"), disk=1)
    # 4. two end records.
    benign = base_recs()
    out = bytearray()
    write_records(out, benign)
    evil = Rec(benign[0].name, PAYLOAD2)
    assert evil.name.endswith("/data.pkl")
    write_records(out, [evil])
    evil_recs = [evil] + benign[1:]
    cd1_off, cd1 = len(out), directory(benign)
    cd2 = directory(evil_recs)
    tail2 = eocd(len(evil_recs), len(cd2), cd1_off + len(cd1) + 22, comment_len=7)
    out += cd1 + eocd(len(benign), len(cd1), cd1_off, comment_len=len(cd2) + len(tail2)) + cd2 + tail2
    files["eocd_comment.pt"] = bytes(out)
    # 5. data.pkl's entry points past the central directory; a benign
    #    data.pkl at offset 0 is in no entry.
    benign = base_recs()
    evil = Rec(benign[0].name, PAYLOAD2)
    out = bytearray()
    write_records(out, benign)
    recs = [evil] + benign[1:]
    cd_off = len(out)
    evil.offset = 0  # placeholder, same length
    cd_len = len(directory(recs))
    evil_off = cd_off + cd_len
    evil_bytes = local_header(evil) + evil.comp
    evil.offset = evil_off
    cd = directory(recs)
    assert len(cd) == cd_len
    out += cd + evil_bytes + eocd(len(recs), len(cd), cd_off)
    files["cd_after.pt"] = bytes(out)
    # 6. stored data.pkl: compressed size covers a benign prefix, the size
    #    the whole pickle (miniz skips its stored-size check for a nonzero
    #    modification time, and reads the size).
    prefix = b"\x80\x02X" + struct.pack("<I", 1000) + b"a" * 1000 + b"0"
    full = prefix + PAYLOAD2[2:]
    recs = base_recs(full, time=DOS_TIME)
    for r in recs:
        r.time = DOS_TIME
        if r.name.endswith("/data.pkl"):
            r.csize = r.local_csize = len(prefix)
    files["stored_size.pt"] = simple_zip(recs)
    # 7. deflated data.pkl of 257 MiB.
    files["deflated_big.pt"] = simple_zip(base_recs(PAYLOAD2 + bytes(257 << 20), method=8))
    # 8. benign, but data.pkl's local header gives other sizes (no data descriptor).
    recs = base_recs(flags=0)
    for r in recs:
        if r.name.endswith("/data.pkl"):
            r.local_csize = r.local_usize = 5
    files["local_sizes.pt"] = simple_zip(recs)
    # 9. zip bomb: 40 entries, one 250 MiB deflated stream of zeros.
    recs = base_recs()
    root = recs[0].name.split("/")[0]
    version = next(r for r in recs if r.name.endswith("/version"))
    zeros = Rec(root + "/data.pkl", bytes(250 << 20), method=8)
    out = bytearray()
    write_records(out, [version, zeros])
    entries = [version]
    for i in range(40):
        name = root + ("/data.pkl" if i == 0 else "/data/%d" % (i - 1))
        e = Rec(name, b"", method=8, comp=b"")
        e.crc, e.csize, e.usize, e.offset = zeros.crc, zeros.csize, zeros.usize, zeros.offset
        e.local_name = zeros.local_name
        entries.append(e)
    cd_off = len(out)
    cd = directory(entries)
    files["bomb_overlap.pt"] = bytes(out + cd + eocd(len(entries), len(cd), cd_off))
    # 10. one benign data.pkl followed by 250 MiB of zeros, deflated.
    recs = base_recs()
    for r in recs:
        if r.name.endswith("/data.pkl"):
            big = Rec(r.name, r.data + bytes(250 << 20), method=8)
            recs[recs.index(r)] = big
            break
    files["bomb_single.pt"] = simple_zip(recs)

    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print("%-18s %8d bytes" % (name, len(data)))


if __name__ == "__main__":
    main()
