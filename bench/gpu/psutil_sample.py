#!/usr/bin/python3
"""The reads of one vramguard sample done in Python, for the side-by-side in
docs/PERFORMANCE.md (bench/gpu/run.sh runs it next to
`go test -bench FullSample ./internal/sampler/`).

It starts N `sleep` processes (the "GPU processes"), then times one sample
four ways, each the mean of ITERS samples after one warm-up sample, in
wall-clock ms and in CPU ms (user+system of this process, and system alone):

  psutil/steady  what vramguard's sampler does every second, with psutil:
                 psutil.process_iter(["ppid", "name"]) over every process
                 (vramguard reads /proc/*/stat for the same: the tree, and
                 (pid, start time) to notice PID reuse), RSS of each GPU
                 process (memory_info), and, once per (pid, create time),
                 what cannot change: cmdline, uid and NSpid (one read of
                 /proc/PID/status) and /proc/PID/cgroup (psutil has no API
                 for NSpid and cgroups; the status read is psutil's own,
                 memoised under oneshot()).
  psutil/cold    the same with nothing kept between samples: cmdline,
                 status and cgroup are read for every GPU process every
                 time (vramguard's FullSample/cold: a new Attributor per
                 sample).
  python/steady  plain Python opening exactly the files vramguard reads
                 (os.listdir("/proc"), every /proc/PID/stat; status, cmdline
                 and cgroup once per process), parsing the same fields:
                 what the reads cost in Python without psutil.
  python/cold    the same, status, cmdline and cgroup every sample.

What psutil reads beyond vramguard: process_iter checks each known process
with is_running(), which reads /proc/PID/stat once more; name() also reads
/proc/PID/cmdline for a command name of 15 characters or more (it may be
truncated); memory_info reads /proc/PID/statm, where vramguard takes RSS
from stat. Those are psutil's way to get the same figures.
"""
import os
import subprocess
import sys
import time

import psutil


def parse_status(data):
    uid, nspid = None, None
    for line in data.split(b"\n"):
        if line.startswith(b"Uid:"):
            uid = int(line.split()[1])
        elif line.startswith(b"NSpid:"):
            nspid = [int(x) for x in line.split()[1:]]
    return uid, nspid


class PsutilSampler:
    def __init__(self, keep):
        self.keep = keep
        self.known = {}  # (pid, create_time) -> immutable facts

    def sample(self, gpids):
        procs = {}
        for p in psutil.process_iter(["ppid", "name"]):
            procs[p.pid] = p
        known = {}
        out = []
        for pid in gpids:
            p = procs[pid]
            with p.oneshot():
                key = (pid, p.create_time())
                facts = self.known.get(key) if self.keep else None
                if facts is None:
                    uid, nspid = parse_status(p._proc._read_status_file())
                    with open(f"/proc/{pid}/cgroup", "rb") as f:
                        cgroup = f.read()
                    facts = (p.cmdline(), p.uids().real, nspid, cgroup)
                known[key] = facts
                out.append((pid, p.info["ppid"], p.info["name"], p.memory_info().rss, facts))
        self.known = known
        return len(procs), out


def read(path):
    with open(path, "rb") as f:
        return f.read()


class PlainSampler:
    """The files vramguard reads, read and parsed in plain Python."""

    def __init__(self, keep):
        self.keep = keep
        self.known = {}

    def sample(self, gpids):
        procs = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                data = read(f"/proc/{name}/stat")
            except OSError:
                continue
            l, r = data.index(b"("), data.rindex(b")")
            f = data[r + 2:].split()
            procs[int(name)] = (data[l + 1:r], int(f[1]), int(f[19]), int(f[21]))  # comm, ppid, start, rss
        known = {}
        out = []
        for pid in gpids:
            comm, ppid, start, rss = procs[pid]
            key = (pid, start)
            facts = self.known.get(key) if self.keep else None
            if facts is None:
                uid, nspid = parse_status(read(f"/proc/{pid}/status"))
                argv = read(f"/proc/{pid}/cmdline").rstrip(b"\0").split(b"\0")
                facts = (argv, uid, nspid, read(f"/proc/{pid}/cgroup"))
            known[key] = facts
            out.append((pid, ppid, comm, rss * 4096, facts))
        self.known = known
        return len(procs), out


def timed(sampler, pids, iters):
    scanned, _ = sampler.sample(pids)  # warm up (and fill what is kept)
    t0, c0 = time.perf_counter(), os.times()
    for _ in range(iters):
        sampler.sample(pids)
    t1, c1 = time.perf_counter(), os.times()
    cpu = (c1.user - c0.user + c1.system - c0.system) / iters
    return (t1 - t0) / iters, cpu, (c1.system - c0.system) / iters, scanned


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    only = sys.argv[3] if len(sys.argv) > 3 else ""
    kids = [subprocess.Popen(["sleep", "600"]) for _ in range(n)]
    try:
        pids = [k.pid for k in kids]
        for name, s in [("psutil/steady", PsutilSampler(True)), ("psutil/cold", PsutilSampler(False)),
                        ("python/steady", PlainSampler(True)), ("python/cold", PlainSampler(False))]:
            if only and not name.startswith(only):
                continue
            dt, cpu, sys_, scanned = timed(s, pids, iters)
            print(f"{name:14} {dt * 1e3:7.2f} ms per sample, {cpu * 1e3:7.2f} cpu-ms, {sys_ * 1e3:7.2f} sys-ms ({n} GPU processes, "
                  f"{scanned} scanned, {iters} samples; psutil {psutil.__version__})", flush=True)
    finally:
        for k in kids:
            k.kill()
            k.wait()


if __name__ == "__main__":
    main()
