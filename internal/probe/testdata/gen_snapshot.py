"""Writes fakecuda/snapshot.json: a torch >= 2.1 memory snapshot
(torch.cuda.memory._snapshot()) of a fine-tune at its OOM, which the fake
torch.cuda pickles at _dump_snapshot. Synthesised (no GPU here) in the
format of torch/cuda/_memory_viz.py's Segment/Block/Frame TypedDicts.
Re-run with /usr/bin/python3 gen_snapshot.py.

Live memory by site, as TopAllocationSites should report it:
  /home/user/model.py:63 forward        24 GiB (12 blocks, under torch frames)
  /home/user/train.py:41 build_model    20 GiB (20 blocks)
  /home/user/train.py:99 main            4 GiB (4 blocks, all-torch frames below)
  ?                                      2 MiB (1 block, no stack recorded)
Inactive and pending-free blocks do not count.
"""

import json
import os
import pickle

GiB = 1 << 30
MiB = 1 << 20


def fr(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


CPP = [fr("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
       fr("/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1187, "malloc")]
TORCH = "/usr/lib/python3/dist-packages/torch"

WEIGHTS = CPP + [
    fr(TORCH + "/nn/modules/module.py", 1160, "convert"),
    fr(TORCH + "/nn/modules/module.py", 810, "_apply"),
    fr("/home/user/train.py", 41, "build_model"),
    fr("/home/user/train.py", 90, "main"),
]
ACTIVATIONS = CPP + [
    fr(TORCH + "/nn/functional.py", 2210, "gelu"),
    fr("/home/user/model.py", 63, "forward"),
    fr(TORCH + "/nn/modules/module.py", 1518, "_call_impl"),
    fr("/home/user/train.py", 97, "main"),
]
OPTIM = CPP + [
    fr(TORCH + "/optim/adam.py", 168, "_init_group"),
    fr(TORCH + "/optim/adam.py", 223, "step"),
    fr(TORCH + "/optim/optimizer.py", 373, "wrapper"),
]
OPTIM_ALL_TORCH = OPTIM  # innermost non-torch frame: none -> innermost .py frame
OPTIM_USER = OPTIM + [fr("/home/user/train.py", 99, "main")]


def block(addr, size, state, frames):
    b = {"address": addr, "size": size, "requested_size": size - 512, "state": state}
    if frames is not None:
        b["frames"] = frames
    return b


def main():
    segs = []
    addr = 0x7F0000000000
    blocks = []
    for _ in range(20):
        blocks.append(block(addr, GiB, "active_allocated", WEIGHTS))
        addr += GiB
    segs.append(blocks)
    blocks = []
    for _ in range(12):
        blocks.append(block(addr, 2 * GiB, "active_allocated", ACTIVATIONS))
        addr += 2 * GiB
    blocks.append(block(addr, 3 * GiB, "inactive", []))
    addr += 3 * GiB
    blocks.append(block(addr, GiB, "active_pending_free", ACTIVATIONS))
    addr += GiB
    segs.append(blocks)
    blocks = []
    for _ in range(4):
        blocks.append(block(addr, GiB, "active_allocated", OPTIM_USER))
        addr += GiB
    blocks.append(block(addr, 2 * MiB, "active_allocated", None))
    addr += 2 * MiB
    segs.append(blocks)
    out = {"segments": [], "device_traces": [[]], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1}}
    for bl in segs:
        total = sum(b["size"] for b in bl)
        out["segments"].append({
            "device": 0,
            "address": bl[0]["address"],
            "total_size": total,
            "allocated_size": sum(b["size"] for b in bl if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in bl if b["state"] != "inactive"),
            "requested_size": sum(b["requested_size"] for b in bl if b["state"] != "inactive"),
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": [0, 0],
            "is_expandable": False,
            "frames": bl[0].get("frames", []),
            "blocks": bl,
        })
    out["device_traces"][0].append({"action": "oom", "addr": 0, "size": 2 * GiB, "stream": 0, "time_us": 1700000000000000, "frames": ACTIVATIONS})
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "fakecuda", "snapshot.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    # The same snapshot as the Go tests read it: pickled as torch >= 2.1's
    # _dump_snapshot does (default protocol) ...
    with open(os.path.join(here, "snapshot_oom.pickle"), "wb") as f:
        pickle.dump(out, f)
    # ... and in the torch 1.13/2.0 layout, where a block's stack sits in
    # "history" (last entry = the live allocation), pickled with protocol 2.
    old = {"segments": []}
    for seg in out["segments"]:
        s = {k: v for k, v in seg.items() if k not in ("frames", "blocks")}
        s["blocks"] = []
        for b in seg["blocks"]:
            nb = {k: v for k, v in b.items() if k != "frames"}
            if "frames" in b and b["state"] != "inactive":
                py = [f for f in b["frames"] if f["filename"].endswith(".py")]
                nb["history"] = [{"addr": b["address"], "real_size": b["size"], "frames": py}]
            s["blocks"].append(nb)
        old["segments"].append(s)
    with open(os.path.join(here, "snapshot_history_v1.pickle"), "wb") as f:
        pickle.dump(old, f, protocol=2)


if __name__ == "__main__":
    main()
