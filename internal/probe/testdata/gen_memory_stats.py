"""Writes memory_stats/*.json: memory_stats() dictionaries as torch 2.x's
CUDA caching allocator returns them, for the fake torch.cuda to replay.

No GPU is available where these were made, so they are synthesised, not
captured: every key torch 2.1-2.8 returns is present (names checked against
torch/cuda/memory.py's memory_stats docstring), and the numbers obey the
allocator's invariants (all = large_pool + small_pool, current = allocated -
freed, peak >= current, reserved >= active >= allocated, requested <=
allocated). Re-run with /usr/bin/python3 gen_memory_stats.py.
"""

import json
import os

GiB = 1 << 30
MiB = 1 << 20
TOTAL = 85_045_870_592  # an 80 GB H100 as cudaMemGetInfo reports it
CONTEXT = 524 * MiB  # CUDA context + cuBLAS workspace, outside the allocator

STATS = ("allocation", "segment", "active", "inactive_split")
BYTE_STATS = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")


def stat(prefix, cur_large, cur_small, peak_large, peak_small, churn_large, churn_small, out):
    for pool, cur, peak, churn in (
        ("large_pool", cur_large, peak_large, churn_large),
        ("small_pool", cur_small, peak_small, churn_small),
    ):
        out[prefix + "." + pool + ".current"] = cur
        out[prefix + "." + pool + ".peak"] = max(peak, cur)
        out[prefix + "." + pool + ".allocated"] = cur + churn
        out[prefix + "." + pool + ".freed"] = churn
    for m in ("current", "peak", "allocated", "freed"):
        out[prefix + ".all." + m] = out[prefix + ".large_pool." + m] + out[prefix + ".small_pool." + m]


def one(step, alloc_l, alloc_s, reserved_l, reserved_s, frag_l, retries, ooms, peaks):
    """alloc_*: allocated bytes now; reserved_*: reserved; frag_l: inactive
    split bytes in the large pool; peaks carries peaks across calls."""
    d = {}
    churn = step * 3 * GiB
    req_l, req_s = alloc_l - 4096 * 37, alloc_s - 512 * 211
    active_l, active_s = alloc_l + 2 * MiB, alloc_s  # blocks awaiting a stream

    def upd(name, l, s):
        pl, ps = peaks.get(name, (0, 0))
        peaks[name] = (max(pl, l), max(ps, s))
        return peaks[name]

    for name, l, s in (
        ("allocated_bytes", alloc_l, alloc_s),
        ("reserved_bytes", reserved_l, reserved_s),
        ("active_bytes", active_l, active_s),
        ("inactive_split_bytes", frag_l, 3 * MiB),
        ("requested_bytes", req_l, req_s),
    ):
        pl, ps = upd(name, l, s)
        stat(name, l, s, pl, ps, churn if name != "reserved_bytes" else 0, churn // 50 if name != "reserved_bytes" else 0, d)
    counts = {
        "allocation": (alloc_l // (64 * MiB), alloc_s // (64 * 1024)),
        "segment": (reserved_l // (256 * MiB), reserved_s // (2 * MiB)),
        "active": (active_l // (64 * MiB) + 1, active_s // (64 * 1024)),
        "inactive_split": (12 + step, 40),
    }
    for name, (l, s) in counts.items():
        pl, ps = upd(name, l, s)
        stat(name, l, s, pl, ps, step * 900, step * 4000, d)
    for name in ("oversize_allocations", "oversize_segments"):
        for m in ("current", "peak", "allocated", "freed"):
            d[name + "." + m] = 0
    d["num_alloc_retries"] = retries
    d["num_ooms"] = ooms
    d["num_sync_all_streams"] = retries
    d["num_device_alloc"] = counts["segment"][0] + counts["segment"][1] + retries
    d["num_device_free"] = retries
    d["max_split_size"] = -1
    free = TOTAL - CONTEXT - reserved_l - reserved_s
    return {"memory_stats": dict(sorted(d.items())), "mem_get_info": [free, TOTAL]}


def h100_finetune():
    """A fine-tune warming up, reaching a plateau, fragmenting, then running
    out: retries climb and the last sample records one OOM."""
    peaks = {}
    rows = []
    plan = [
        # alloc_l, alloc_s, reserved_l, reserved_s, frag_l, retries, ooms
        (14 * GiB, 180 * MiB, 16 * GiB, 200 * MiB, 1 * GiB, 0, 0),
        (41 * GiB, 210 * MiB, 52 * GiB, 230 * MiB, 6 * GiB, 0, 0),
        (38 * GiB, 205 * MiB, 60 * GiB, 230 * MiB, 12 * GiB, 0, 0),
        (44 * GiB, 215 * MiB, 70 * GiB, 232 * MiB, 19 * GiB, 2, 0),
        (47 * GiB, 220 * MiB, 76 * GiB, 240 * MiB, 24 * GiB, 9, 0),
        (49 * GiB, 220 * MiB, 78 * GiB, 240 * MiB, 27 * GiB, 17, 1),
    ]
    for i, row in enumerate(plan):
        rows.append(one(i + 1, *row, peaks=peaks))
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = {
        "about": "synthesised torch 2.x memory_stats() of device 0 during a fine-tune on an 80 GB H100; see ../README.md",
        "device_count": 2,
        "unused_devices": [1],
        "samples": h100_finetune(),
    }
    with open(os.path.join(here, "memory_stats", "h100_finetune.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
