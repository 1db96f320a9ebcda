#!/usr/bin/python3
"""On a machine with CUDA: record a real memory snapshot of a short training
loop and of an OOM, and check `vramguard snapshot --json` against torch's own
totals of the same snapshots (torch.cuda.memory._snapshot()).

    scripts/gpu-snapshot-check.py VRAMGUARD OUTDIR

Prints PASS/FAIL lines; exit 1 when any check failed. scripts/gpu-check.sh
runs it.
"""
import json
import pickle
import subprocess
import sys

import torch

vg, out = sys.argv[1], sys.argv[2]
failed = 0


def check(name, ok, detail=""):
    global failed
    print(("PASS " if ok else "FAIL ") + name + (": " + detail if detail else ""))
    failed += not ok


def totals(snap):
    """Per device, from torch's dict: what vramguard's summary must say."""
    out = {}
    for seg in snap["segments"]:
        d = out.setdefault(seg["device"], {"reserved": 0, "allocated": 0, "segments": 0, "trace": {}})
        d["segments"] += 1
        for b in seg["blocks"]:
            d["reserved"] += b["size"]
            if b["state"] == "active_allocated":
                d["allocated"] += b["size"]
    for dev, tr in enumerate(snap.get("device_traces", [])):
        d = out.setdefault(dev, {"reserved": 0, "allocated": 0, "segments": 0, "trace": {}})
        for e in tr:
            d["trace"][e["action"]] = d["trace"].get(e["action"], 0) + 1
    return out


def compare(label, path, snap):
    want = totals(snap)
    with open(path, "wb") as f:
        pickle.dump(snap, f)
    r = subprocess.run([vg, "snapshot", path, "--json"], capture_output=True, text=True)
    check(label + ": vramguard snapshot exits 0", r.returncode == 0, r.stderr.strip())
    if r.returncode != 0:
        return None
    got = {d["device"]: d for d in json.loads(r.stdout)["devices"]}
    for dev, w in want.items():
        g = got.get(dev, {})
        trace = {a["action"]: a["count"] for a in g.get("trace") or []}
        check(f"{label}: device {dev} reserved", g.get("reserved_bytes") == w["reserved"], f'{g.get("reserved_bytes")} vs torch {w["reserved"]}')
        check(f"{label}: device {dev} allocated", g.get("allocated_bytes") == w["allocated"], f'{g.get("allocated_bytes")} vs torch {w["allocated"]}')
        check(f"{label}: device {dev} segments", g.get("segments") == w["segments"], f'{g.get("segments")} vs torch {w["segments"]}')
        check(f"{label}: device {dev} trace", trace == w["trace"], f"{trace} vs torch {w['trace']}")
    return got


torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.Adam(model.parameters())
for _ in range(20):
    loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
compare("training loop", out + "/snapshot-train.pickle", torch.cuda.memory._snapshot())

try:
    free, total = torch.cuda.mem_get_info()
    torch.empty(total * 2, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError:
    pass
snap = torch.cuda.memory._snapshot()
got = compare("OOM", out + "/snapshot-oom.pickle", snap)
ooms = [e for tr in snap["device_traces"] for e in tr if e["action"] == "oom"]
if got is not None and ooms:
    g = got.get(torch.cuda.current_device(), {}).get("oom") or {}
    check("OOM: asked-for size", g.get("size") == ooms[-1]["size"], f'{g.get("size")} vs torch {ooms[-1]["size"]}')
    check("OOM: device free", g.get("device_free") == ooms[-1]["device_free"], f'{g.get("device_free")} vs torch {ooms[-1]["device_free"]}')
else:
    check("OOM: an oom trace entry", bool(ooms))
torch.cuda.memory._record_memory_history(enabled=None)
sys.exit(1 if failed else 0)
