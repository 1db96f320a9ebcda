#!/usr/bin/env python3
"""Writes eight-gpus.json: 8 simulated H100s and 200 processes (50 jobs of a
GPU-holding trainer and three DataLoader workers; every fifth trainer leaks,
every seventh restarts each 90 s). Used by cpu.sh."""
import json

procs = []
for j in range(50):
    root = 950000 + j * 10
    dev = j % 8
    mem = [["0s", "2GiB"], ["60s", f"{8 + j % 30}GiB"]]
    if j % 5 == 0:
        mem = [["0s", "4GiB"], ["30m", "70GiB"]]
    p = {"pid": root, "device": dev, "sm_util": 80, "memory": mem,
         "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", f"train_{j:02d}.py"], "rss": "3GiB"}}
    if j % 7 == 0:
        p["end"] = "90s"
    procs.append(p)
    for w in range(1, 4):
        procs.append({"pid": root + w, "host": {"ppid": root, "pgid": root, "comm": "pt_data_worker",
                                                 "cmdline": ["python3", f"train_{j:02d}.py"], "rss": "900MiB"}})
devices = [{"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-bench-{i}", "total": "80GiB", "baseline": "500MiB", "util": 85}
           for i in range(8)]
sc = {"name": "eight-gpus", "description": "8 GPUs, 200 processes in 50 jobs (bench/serve/gen_scenario.py)",
      "duration": "30m", "loop": True, "devices": devices, "processes": procs}
with open("eight-gpus.json", "w") as f:
    json.dump(sc, f, indent=1)
print(len(procs), "processes")
