#!/usr/bin/python3
"""The same work as one vramguard sample, done with psutil (Debian's
python3-psutil), for the side-by-side in docs/PERFORMANCE.md.

It starts N `sleep` processes (the "GPU processes"), then per iteration:
scans every process for pid/ppid/name (as vramguard scans /proc/*/stat to
build the tree), and for each of the N processes reads its command line,
RSS, uids, NSpid (psutil has no API for it: /proc/PID/status) and cgroup
(no psutil API either: /proc/PID/cgroup). Prints mean ms per iteration.
"""
import subprocess
import sys
import time

import psutil


def sample(pids):
    procs = {}
    for p in psutil.process_iter(["pid", "ppid", "name"]):
        procs[p.info["pid"]] = p.info
    out = []
    for pid in pids:
        p = psutil.Process(pid)
        with p.oneshot():
            row = {
                "cmdline": p.cmdline(),
                "rss": p.memory_info().rss,
                "uid": p.uids().real,
                "ppid": procs[pid]["ppid"],
            }
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    row["nspid"] = line.split()[1:]
        with open(f"/proc/{pid}/cgroup") as f:
            row["cgroup"] = f.read()
        out.append(row)
    return len(procs), out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    kids = [subprocess.Popen(["sleep", "600"]) for _ in range(n)]
    try:
        pids = [k.pid for k in kids]
        scanned, _ = sample(pids)  # warm up
        t0 = time.perf_counter()
        for _ in range(iters):
            sample(pids)
        dt = (time.perf_counter() - t0) / iters
        print(f"psutil {psutil.__version__}: {dt * 1e3:.1f} ms per sample "
              f"({n} processes, {scanned} scanned, {iters} iterations)")
    finally:
        for k in kids:
            k.kill()
            k.wait()


if __name__ == "__main__":
    main()
