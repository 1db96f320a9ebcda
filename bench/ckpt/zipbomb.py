#!/usr/bin/python3
"""Time and peak RSS of `vramguard ckpt` on the zip bomb fixtures, next to torch.load.

    bench/ckpt/zipbomb.sh [OLD_VRAMGUARD]        (builds vramguard, then runs this)
    /usr/bin/python3 bench/ckpt/zipbomb.py VRAMGUARD [OLD_VRAMGUARD]

For each fixture of internal/ckpt/testdata/zipattack that inflates to
250 MiB or more (scripts/gen-zip-fixtures.py), runs `ckpt scan`, `ckpt
inspect`, `ckpt verify` and `ckpt verify --deep` (and the same with
OLD_VRAMGUARD, a build from before the change, when given), and
torch.load(path) in Debian's python3-torch, plus `import torch` alone as the
interpreter's baseline. Each command runs 3 times in a temp directory (the
payload fixture touches a file there); the table gives the median wall time
and the largest peak RSS (getrusage of the child: ru_maxrss) with the exit
status. Prints Markdown.
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "internal", "ckpt", "testdata", "zipattack")
FILES = ["bomb_overlap.pt", "bomb_single.pt", "deflated_big.pt"]
PY = "/usr/bin/python3"


def measure(argv, cwd, runs=3):
    """Median wall seconds, max peak RSS in MB, exit status of argv."""
    times, peaks, code = [], [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        times.append(time.perf_counter() - t0)
        peaks.append(ru.ru_maxrss / 1024)  # KiB on Linux
        code = os.waitstatus_to_exitcode(status)
    return statistics.median(times), max(peaks), code


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bins = [("vramguard", sys.argv[1])]
    if len(sys.argv) > 2:
        bins.append(("before", sys.argv[2]))
    print("| file (size) | command | exit | median s | peak RSS MB |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        s, m, c = measure([PY, "-c", "import torch"], tmp)
        print("| – | `python3 -c 'import torch'` (baseline) | %d | %.2f | %.0f |" % (c, s, m))
        for f in FILES:
            path = os.path.abspath(os.path.join(FIXTURES, f))
            label = "%s (%d KB)" % (f, os.path.getsize(path) // 1000)
            for name, b in bins:
                for cmd in (["scan"], ["inspect"], ["verify"], ["verify", "--deep"]):
                    s, m, c = measure([b, "ckpt"] + cmd + [path], tmp)
                    print("| %s | %s `ckpt %s` | %d | %.3f | %.0f |" % (label, name, " ".join(cmd), c, s, m))
            s, m, c = measure([PY, "-c", "import sys, torch; torch.load(sys.argv[1])", path], tmp)
            print("| %s | `torch.load` | %d | %.2f | %.0f |" % (label, c, s, m))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
