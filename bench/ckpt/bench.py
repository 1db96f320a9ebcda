#!/usr/bin/python3
"""Benchmark `vramguard ckpt` against Python and cat, side by side.

    /usr/bin/python3 bench/ckpt/bench.py VRAMGUARD_BINARY [WORKDIR] [--mib N] [--count K]

Writes K real torch checkpoints of about N MiB each into WORKDIR (a temp
dir by default, removed afterwards) and prints a Markdown table:

- `vramguard ckpt ls DIR --json` versus torch.load(map_location="cpu") of
  every file in the same directory (what a script that reads the epoch of
  each checkpoint does);
- `vramguard ckpt verify --deep FILE` versus `cat FILE > /dev/null` on the
  largest file (both with the file in the page cache: a warm-up read first);
- the bytes `vramguard ckpt inspect` reads of that file.

Each timing is the median of 5 runs. Needs Debian's python3-torch.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def median_time(fn, runs=5):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(zip(sys.argv[1:], sys.argv[2:]))
    vg = os.path.abspath(args[0])
    mib = int(opts.get("--mib", 256))
    count = int(opts.get("--count", 4))
    work = args[1] if len(args) > 1 else tempfile.mkdtemp(prefix="vg-ckpt-bench-")
    own = len(args) <= 1
    os.makedirs(work, exist_ok=True)
    try:
        torch.manual_seed(0)
        # A transformer-like state dict: 2-D weights of 1024 columns.
        n_layers = max(1, mib // 8)  # 8 MiB per weight
        for k in range(count):
            sd = {f"layers.{i}.weight": torch.randn(2048, 1024) for i in range(n_layers)}
            sd.update({f"layers.{i}.bias": torch.randn(1024) for i in range(n_layers)})
            torch.save({"epoch": k, "step": 1000 * (k + 1), "loss": 1.0 / (k + 1), "model": sd},
                       os.path.join(work, f"ckpt-{k}.pt"))
        files = sorted(os.path.join(work, f) for f in os.listdir(work))
        total = sum(os.path.getsize(f) for f in files)
        for f in files:  # warm the page cache for everyone
            subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)

        def vg_ls():
            subprocess.run([vg, "ckpt", "ls", work, "--json"], stdout=subprocess.DEVNULL, check=True)

        def py_load():
            for f in files:
                obj = torch.load(f, map_location="cpu")
                _ = obj["epoch"]

        big = max(files, key=os.path.getsize)
        size = os.path.getsize(big)

        def vg_deep():
            subprocess.run([vg, "ckpt", "verify", "--deep", big], stdout=subprocess.DEVNULL, check=True)

        def cat():
            subprocess.run(["sh", "-c", 'cat "$1" > /dev/null', "sh", big], check=True)

        t_ls, t_load = median_time(vg_ls), median_time(py_load)
        t_deep, t_cat = median_time(vg_deep), median_time(cat)
        rep = json.loads(subprocess.run([vg, "ckpt", "inspect", "--json", big], capture_output=True, check=True).stdout)
        gib = 1 << 30
        print(f"Checkpoints: {count} files written by torch {torch.__version__}, {total / gib:.2f} GiB in all; "
              f"largest {size / gib:.2f} GiB. Median of 5 runs, page cache warm, {os.cpu_count()} CPUs.\n")
        print("| task | vramguard | baseline | baseline command |")
        print("| --- | --- | --- | --- |")
        print(f"| list {count} checkpoints with epoch/step | {t_ls * 1000:.0f} ms (`ckpt ls DIR --json`) | "
              f"{t_load * 1000:.0f} ms | `torch.load(f, map_location=\"cpu\")` of each file |")
        print(f"| read and check every byte of {size / gib:.2f} GiB | {t_deep * 1000:.0f} ms "
              f"({size / t_deep / gib:.2f} GiB/s, `ckpt verify --deep`) | {t_cat * 1000:.0f} ms "
              f"({size / t_cat / gib:.2f} GiB/s) | `cat FILE > /dev/null` |")
        print(f"| bytes read by `ckpt inspect` | {rep['bytes_read']} of {size} "
              f"({100 * rep['bytes_read'] / size:.4f}%) | | |")
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
