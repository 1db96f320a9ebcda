#!/usr/bin/python3
"""Time and peak RSS of `vramguard ckpt` on inputs built to cost much,
next to what a user would run on them (numpy/torch are not needed to build
them; the loaders are Debian's python3-torch, json and zipfile).

    bench/ckpt/bounds.sh [OLD_VRAMGUARD]        (builds vramguard, then runs this)
    /usr/bin/python3 bench/ckpt/bounds.py VRAMGUARD [OLD_VRAMGUARD]

Inputs, written to a temp directory:

- st_many.safetensors: a 100 MiB safetensors header listing ~1.7 M
  zero-size tensors (baseline: json.loads of the header, what the format's
  reference readers do first);
- st_padded.safetensors: one tensor, the header padded with spaces to the
  format's 100 MiB maximum (baseline: json.loads);
- st_bigmeta.safetensors: one tensor, a 100 MiB header that is one
  __metadata__ string (baseline: json.loads);
- memo.pkl: a 10 KB pickle whose lists memoize each other, doubling at
  each level, and memo_dict.pkl, dicts that do the same forty levels deep
  over one int (baseline: pickle.load, which shares the references);
- records.pt: a torch zip with 1 M records (baseline: zipfile.ZipFile,
  which reads the central directory as torch's reader does);
- hf/checkpoint-1: trainer_state.json a sparse 1 GiB file (baseline:
  json.load of it);
- bomb.gz, bomb.xz, bomb.zst: a valid pickle of 65 MiB of zero bytes,
  past the scanner's 64 MiB bound for a compressed pickle, in a few KB
  (baseline: pickle.load of gzip.open / lzma.open, pickle.loads of
  python3-zstandard's reader); bigdict.xz: a harmless pickle in an xz
  block whose header declares a 4 GiB dictionary, which scan refuses to
  allocate (baseline: lzma.open, which allocates it).

Each command runs 3 times (once when it takes over 5 s); the table gives
the median wall and CPU time (user + system: on a shared machine the wall
time includes waiting for a core), the largest peak RSS (ru_maxrss of the
child) and the exit status. Prints
Markdown.
"""
import os
import pickle
import resource
import statistics
import struct
import subprocess
import sys
import gzip
import lzma
import tempfile
import time
import zipfile
import zlib

PY = "/usr/bin/python3"
MiB = 1 << 20


def st_file(path, header):
    h = header.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)


def gen(d):
    # ~1.7 M zero-size tensors in a 100 MiB header.
    parts, n, size = [], 0, 2
    while True:
        e = '"t%07d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},' % n
        if size + len(e) > 100 * MiB - 1:
            break
        parts.append(e)
        size += len(e)
        n += 1
    st_file(os.path.join(d, "st_many.safetensors"), "{" + "".join(parts)[:-1] + "}")
    one = '{"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}'
    st_file(os.path.join(d, "st_padded.safetensors"), one + " " * (100 * MiB - len(one)))
    meta = '{"__metadata__":{"k":"%s"},"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}'
    st_file(os.path.join(d, "st_bigmeta.safetensors"), meta % ("x" * (100 * MiB - len(meta) + 2)))
    # memo DAG: level i+1 is a list holding level i twice.
    b = bytearray(b"\x80\x02]q\x00")
    for i in range(1, 1200):
        b += b"(h" + bytes([(i - 1) % 256]) + b"h" + bytes([(i - 1) % 256]) + b"lq" + bytes([i % 256])
        if len(b) > 10_000 - 16:
            break
    b += b"."
    with open(os.path.join(d, "memo.pkl"), "wb") as f:
        f.write(b)
    # memo DAG of dicts: {'a': d, 'b': d} forty levels deep over {'x': 1}:
    # 2**39 paths to one int.
    b = bytearray(b"\x80\x02}q\x00X\x01\x00\x00\x00xK\x01s")
    for i in range(1, 40):
        b += b"}q" + bytes([i]) + b"(X\x01\x00\x00\x00ah" + bytes([i - 1]) + b"X\x01\x00\x00\x00bh" + bytes([i - 1]) + b"u"
    b += b"."
    with open(os.path.join(d, "memo_dict.pkl"), "wb") as f:
        f.write(b)
    # 1 M records.
    with zipfile.ZipFile(os.path.join(d, "records.pt"), "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        for i in range(1_000_000):
            z.writestr("archive/extra/%d" % i, b"")
        z.writestr("archive/version", "3\n")
    # sparse 1 GiB trainer_state.json.
    c = os.path.join(d, "hf", "checkpoint-1")
    os.makedirs(c)
    with open(os.path.join(c, "trainer_state.json"), "wb") as f:
        f.write(b'{"global_step": 1, "log_history": []}')
        f.truncate(1 << 30)
    with open(os.path.join(c, "config.json"), "w") as f:
        f.write("{}")
    # Compressed pickles past the bound.
    import zstandard
    big = pickle.dumps(bytes(65 * MiB), protocol=4)
    for ext, comp in (("gz", lambda b: gzip.compress(b, mtime=0)), ("xz", lzma.compress),
                      ("zst", zstandard.ZstdCompressor().compress)):
        with open(os.path.join(d, "bomb." + ext), "wb") as f:
            f.write(comp(big))
    # An xz block whose LZMA2 filter declares a 4 GiB dictionary (props
    # byte 40), its header CRC recomputed: what a decoder allocates if it
    # trusts the header.
    x = bytearray(lzma.compress(pickle.dumps({"a": 1}, protocol=4),
                                filters=[{"id": lzma.FILTER_LZMA2, "dict_size": 4096}]))
    hsize = (x[12] + 1) * 4
    hdr = x[12:12 + hsize]
    i = 2  # block flags at 1; no size fields (flags 0x00): filter flags follow
    assert hdr[1] & 0xc0 == 0 and hdr[i] == 0x21 and hdr[i + 1] == 1
    hdr[i + 2] = 40
    hdr[-4:] = struct.pack("<I", zlib.crc32(bytes(hdr[:-4])))
    x[12:12 + hsize] = hdr
    with open(os.path.join(d, "bigdict.xz"), "wb") as f:
        f.write(x)


def measure(argv, runs=3):
    """Median wall s, median CPU s (user+system), max peak RSS MB, exit
    status; a command slower than 5 s runs once."""
    times, cpus, peaks, code = [], [], [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        times.append(time.perf_counter() - t0)
        cpus.append(ru.ru_utime + ru.ru_stime)
        peaks.append(ru.ru_maxrss / 1024)
        code = os.waitstatus_to_exitcode(status)
        if times[-1] > 5:
            break
    return statistics.median(times), statistics.median(cpus), max(peaks), code


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--gen":
        gen(sys.argv[2])
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bins = [("vramguard", sys.argv[1])]
    if len(sys.argv) > 2:
        bins.append(("before", sys.argv[2]))
    with tempfile.TemporaryDirectory() as d:
        # In a child: a child's ru_maxrss counts from the fork, so the
        # measuring process stays small.
        subprocess.run([PY, os.path.abspath(__file__), "--gen", d], check=True)
        st_load = "import sys,struct,json; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; json.loads(f.read(n))"
        cases = [
            ("st_many.safetensors", [["inspect"], ["verify", "--deep"], ["scan"]], st_load),
            ("st_padded.safetensors", [["inspect"], ["scan"]], st_load),
            ("memo_dict.pkl", [["inspect"], ["scan"]], "import sys,pickle; pickle.load(open(sys.argv[1],'rb'))"),
            ("st_bigmeta.safetensors", [["inspect"], ["scan"]], st_load),
            ("memo.pkl", [["inspect"], ["scan"]], "import sys,pickle; pickle.load(open(sys.argv[1],'rb'))"),
            ("records.pt", [["inspect"], ["scan"]], "import sys,zipfile; zipfile.ZipFile(sys.argv[1])"),
            ("hf/checkpoint-1", [["inspect"], ["latest"]], "import sys,json; json.load(open(sys.argv[1]+'/trainer_state.json'))"),
            ("bomb.gz", [["scan"]], "import sys,pickle,gzip; pickle.load(gzip.open(sys.argv[1]))"),
            ("bomb.xz", [["scan"]], "import sys,pickle,lzma; pickle.load(lzma.open(sys.argv[1]))"),
            ("bomb.zst", [["scan"]], "import sys,pickle,zstandard; pickle.loads(zstandard.open(sys.argv[1]).read())"),
            ("bigdict.xz", [["scan"]], "import sys,pickle,lzma; pickle.load(lzma.open(sys.argv[1]))"),
        ]
        print("| input (size) | command | exit | median wall s | median CPU s | peak RSS MB |")
        print("|---|---|---:|---:|---:|---:|")
        for name, cmds, base in cases:
            path = os.path.join(d, name)
            size = os.path.getsize(path) if os.path.isfile(path) else os.path.getsize(os.path.join(path, "trainer_state.json"))
            label = "%s (%s)" % (name, "%.1f MB" % (size / 1e6) if size > 1e5 else "%d KB" % (size // 1000))
            for bname, b in bins:
                for cmd in cmds:
                    arg = os.path.dirname(path) if cmd == ["latest"] else path
                    s, u, m, c = measure([b, "ckpt"] + cmd + [arg])
                    print("| %s | %s `ckpt %s` | %d | %.3f | %.3f | %.0f |" % (label, bname, " ".join(cmd), c, s, u, m))
                    sys.stdout.flush()
            s, u, m, c = measure([PY, "-c", base, path])
            print("| %s | `%s` | %d | %.2f | %.2f | %.0f |" % (label, base.split(";")[-1].strip(), c, s, u, m))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
