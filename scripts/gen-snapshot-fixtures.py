#!/usr/bin/python3
"""Write the CUDA memory snapshot fixtures of internal/snapshot/testdata.

    /usr/bin/python3 scripts/gen-snapshot-fixtures.py [OUTDIR]
    /usr/bin/python3 scripts/gen-snapshot-fixtures.py --large OUT.pickle [MB]

torch here has no CUDA, so the snapshots are built as torch's C++ builds them
(torch/csrc/cuda/Module.cpp, _memory_snapshot; memory_snapshot.cpp for the C++
writer): the same keys in the same order, one dict per distinct frame shared
by every stack that holds it, one list per distinct stack shared by every
block and trace entry recorded with it, the one empty frames list shared by
every entry without a stack. Real CPython pickle dumps them at protocols 2, 4
and 5; the C++ writer's form (protocol 2, memoised strings, 64-bit LONG1
integers) is written by cxx_pickle below, opcode for opcode as
torch/csrc/jit/serialization/pickler.cpp writes it.

Next to each fixture, NAME.totals.json holds this script's own account of it
(per device: reserved, allocated, active, requested, segments by kind, free
bytes and the largest free block, the allocation sites by live bytes, trace
events by action, the OOM): the figures the Go tests compare against.
"""
import json
import os
import pickle
import random
import struct
import sys

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
TORCH = "/usr/lib/python3/dist-packages/torch"

# Allocation sites: (innermost non-torch frame), the torch frames inside it.
SITES = [
    (("/home/user/model.py", 63, "forward"), [(TORCH + "/nn/functional.py", 2210, "gelu")]),
    (("/home/user/model.py", 71, "forward"), [(TORCH + "/nn/modules/linear.py", 114, "forward")]),
    (("/home/user/train.py", 41, "build_model"), [(TORCH + "/nn/modules/module.py", 1160, "convert"),
                                                  (TORCH + "/nn/modules/module.py", 810, "_apply")]),
    (("/home/user/train.py", 99, "main"), [(TORCH + "/optim/adam.py", 168, "_init_group"),
                                           (TORCH + "/optim/optimizer.py", 373, "wrapper")]),
    (("/home/user/data.py", 12, "collate"), []),
]
LEAK_SITE = (("/home/user/train.py", 57, "train_step"), [(TORCH + "/_tensor.py", 40, "wrapped")])
CPP = [("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
       ("/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1187, "malloc")]
OUTER = [("/home/user/train.py", 120, "<module>")]
STATES = ["active_allocated", "active_pending_free", "inactive"]


def site_name(f):
    return f"{f[0]}:{f[1]} {f[2]}"


class Builder:
    """Shares frame dicts and stack lists as torch's py_symbolize does."""

    def __init__(self):
        self.frames = {}
        self.stacks = {}
        self.empty = []  # the one empty_frames list

    def frame(self, f):
        d = self.frames.get(f)
        if d is None:
            d = {"name": f[2], "filename": f[0], "line": f[1]}
            self.frames[f] = d
        return d

    def stack(self, frames):
        key = tuple(frames)
        l = self.stacks.get(key)
        if l is None:
            l = [self.frame(f) for f in frames]
            self.stacks[key] = l
        return l


def stack_for(site, depth_extra=0, salt=0):
    user, inner = site
    # deep stacks through a program's finite code: a few thousand distinct
    # frames, combined into as many distinct stacks as there are salts
    r = random.Random(salt)
    extra = [(f"/home/user/lib/layer{r.randrange(60)}.py", 10 + r.randrange(40), f"call{i % 7}")
             for i in range(depth_extra)]
    return CPP + inner + [user] + extra + OUTER


def innermost_user(frames):
    first = None
    for f in frames:
        if not f[0].endswith(".py"):
            continue
        if first is None:
            first = f
        if "/torch/" not in f[0] and not f[0].startswith("torch/"):
            return f
    return first


def simulate(rng, devices, segs_per_dev, blocks_per_seg, site_weights, leak_blocks=0, oom=True,
             expandable=True, pools=True, depth_extra=0, trace_events=0, huge=False, fragmented=False):
    """A plain model of the allocator's state: devices of segments of blocks,
    each block with its state, requested size and stack, and each device's
    trace. Everything the snapshot holds and the totals say comes from it."""
    model = []
    t = 1_732_000_000_000_000  # time_us: LONG1 in every protocol
    for d in range(devices):
        dev = {"device": d, "segments": [], "trace": []}
        model.append(dev)
        if segs_per_dev[d] == 0:
            continue
        addr = 0x7F3A_0000_0000 + d * 0x10_0000_0000
        if huge and d == 0:
            addr = 0xFFFF_8000_0000_0000  # >= 2**63: a 9-byte LONG1 in Python's pickle
        for s in range(segs_per_dev[d]):
            large = s % 3 != 2
            exp = expandable and large and s == 1
            pool = (1, 2) if pools and s == 3 else (0, 0)
            nb = blocks_per_seg if large else 4
            blocks = []
            baddr = addr
            for b in range(nb):
                if large:
                    size = rng.choice([2, 4, 8, 20, 64]) * MiB
                else:
                    size = rng.choice([512, 4096, 65536, 262144])
                state = rng.choices(STATES, weights=[6, 1, 2])[0]
                site = None
                if state != "inactive" or rng.random() < 0.5:
                    site = rng.choices(SITES, weights=site_weights)[0]
                req = size - rng.choice([0, 0, 512, 1000]) if state != "inactive" else 0
                blocks.append({"address": baddr, "size": size, "requested_size": max(req, 0), "state": state,
                               "stack": stack_for(site, depth_extra, b) if site else None,
                               "older": stack_for(SITES[0]) if state == "inactive" and site else None})
                baddr += size
            if s == 0 and leak_blocks:
                for b in range(leak_blocks):
                    blocks.append({"address": baddr, "size": 2 * MiB, "requested_size": 2 * MiB - 512,
                                   "state": "active_allocated", "stack": stack_for(LEAK_SITE), "older": None,
                                   "leak": True})
                    baddr += 2 * MiB
            total = baddr - addr
            seg = {"device": d, "address": addr, "total_size": total, "stream": 0 if s % 4 else 94_210_080,
                   "large": large, "expandable": exp, "pool": pool, "blocks": blocks,
                   "stack": blocks[0]["stack"]}
            dev["segments"].append(seg)
            addr += total + 64 * MiB
            # trace: the segment's allocation, then each block's life
            t += rng.randint(5, 500)
            dev["trace"].append({"action": "segment_map" if exp else "segment_alloc", "addr": seg["address"],
                                 "size": total, "stream": seg["stream"], "time_us": t, "stack": seg["stack"]})
            for bl in blocks:
                if bl["stack"] is None:
                    continue
                t += 3 if bl.get("leak") else rng.randint(1, 50)  # the leak leaves the rest as it was
                dev["trace"].append({"action": "alloc", "addr": bl["address"], "size": bl["size"],
                                     "stream": seg["stream"], "time_us": t, "stack": bl["stack"]})
                if bl["state"] != "active_allocated":
                    t += rng.randint(1, 50)
                    dev["trace"].append({"action": "free_requested", "addr": bl["address"], "size": bl["size"],
                                         "stream": seg["stream"], "time_us": t, "stack": bl["stack"]})
                if bl["state"] == "inactive":
                    t += rng.randint(1, 50)
                    dev["trace"].append({"action": "free_completed", "addr": bl["address"], "size": bl["size"],
                                         "stream": seg["stream"], "time_us": t, "stack": bl["stack"]})
        # churn: alloc/free pairs that leave nothing behind (the bulk of a long trace)
        for i in range(trace_events // 3):
            site = rng.choices(SITES, weights=site_weights)[0]
            st = stack_for(site, depth_extra, i)
            a = 0x7F3A_0000_0000 + rng.randrange(1 << 30) * 512
            sz = rng.choice([512, 4096, 2 * MiB, 8 * MiB])
            for act in ("alloc", "free_requested", "free_completed"):
                t += rng.randint(1, 20)
                dev["trace"].append({"action": act, "addr": a, "size": sz, "stream": 0, "time_us": t,
                                     "stack": st})
        if expandable and segs_per_dev[d] > 1:
            t += 7
            dev["trace"].append({"action": "segment_unmap", "addr": dev["segments"][1]["address"] + 512 * MiB,
                                 "size": 2 * MiB, "stream": 0, "time_us": t, "stack": None})
        if oom and d == 0:
            t += 100
            free = 300 * MiB if not huge else 1 << 65  # a huge value: beyond uint64
            size = 6 * GiB
            if fragmented:
                # more than the largest free block, less than the cache's free total
                holes = [b["size"] for sg in dev["segments"] if sg["large"] for b in sg["blocks"]
                         if b["state"] == "inactive"]
                size = max(holes) + 2 * MiB
                assert sum(holes) >= size, holes
                free = 1 * MiB
            dev["trace"].append({"action": "oom", "device_free": free, "size": size, "stream": 0,
                                 "time_us": t, "stack": stack_for(SITES[0])})
    return model


def totals(model, version):
    out = {"version": version, "devices": []}
    for dev in model:
        o = {"device": dev["device"], "reserved": 0, "allocated": 0, "active": 0, "requested": 0,
             "pending_free": 0, "inactive": 0, "largest_free": 0, "largest_free_large": 0,
             "segments": {"total": 0, "large": 0, "small": 0, "expandable": 0, "private_pool": 0},
             "blocks": 0, "sites": {}, "trace": {}, "oom": None}
        for seg in dev["segments"]:
            o["segments"]["total"] += 1
            o["segments"]["large" if seg["large"] else "small"] += 1
            o["segments"]["expandable"] += seg["expandable"]
            o["segments"]["private_pool"] += seg["pool"] != (0, 0)
            for b in seg["blocks"]:
                o["blocks"] += 1
                o["reserved"] += b["size"]
                if b["state"] == "active_allocated":
                    o["allocated"] += b["size"]
                    o["active"] += b["size"]
                    o["requested"] += b["requested_size"]
                    f = innermost_user(b["stack"]) if b["stack"] else None
                    k = site_name(f) if f else "?"
                    s = o["sites"].setdefault(k, {"bytes": 0, "blocks": 0})
                    s["bytes"] += b["size"]
                    s["blocks"] += 1
                elif b["state"] == "active_pending_free":
                    o["active"] += b["size"]
                    o["pending_free"] += b["size"]
                else:
                    o["inactive"] += b["size"]
                    o["largest_free"] = max(o["largest_free"], b["size"])
                    if seg["large"]:
                        o["largest_free_large"] = max(o["largest_free_large"], b["size"])
        if version in ("1.13",):
            pass  # no trace in 1.13
        else:
            for e in dev["trace"]:
                o["trace"][e["action"]] = o["trace"].get(e["action"], 0) + 1
                if e["action"] == "oom":
                    o["oom"] = {"size": e["size"], "device_free": e["device_free"]}
        o["sites"] = sorted(({"site": k, **v} for k, v in o["sites"].items()),
                            key=lambda s: (-s["bytes"], s["site"]))
        out["devices"].append(o)
    return out


def snapshot(model, version, b):
    """The dicts torch's _memory_snapshot returns for version."""
    old = version in ("1.13", "2.0")
    has_time = version not in ("1.13", "2.0", "2.1")
    segs = []
    for dev in model:
        for seg in dev["segments"]:
            sd = {"device": seg["device"], "address": seg["address"], "total_size": seg["total_size"]}
            alloc = sum(x["size"] for x in seg["blocks"] if x["state"] == "active_allocated")
            active = sum(x["size"] for x in seg["blocks"] if x["state"] != "inactive")
            sd["allocated_size"] = alloc
            sd["active_size"] = active
            if not old:
                sd["requested_size"] = sum(x["requested_size"] for x in seg["blocks"]
                                           if x["state"] == "active_allocated")
            sd["stream"] = seg["stream"]
            sd["segment_type"] = "large" if seg["large"] else "small"
            if not old:
                sd["segment_pool_id"] = seg["pool"]
                sd["is_expandable"] = seg["expandable"]
                if seg["stack"] is None:
                    sd["frames"] = b.empty
            blocks = []
            for x in seg["blocks"]:
                if old:
                    bd = {"size": x["size"], "state": x["state"]}
                    hist = []
                    if x["older"]:
                        hist.append({"addr": x["address"], "real_size": x["size"] // 2,
                                     "frames": b.stack(x["older"])})
                    if x["stack"]:
                        h = {"addr": x["address"], "real_size": x["requested_size"] or x["size"]}
                        h["frames"] = b.stack(x["stack"])
                        hist.append(h)
                    if hist:
                        bd["history"] = hist
                else:
                    bd = {"address": x["address"], "size": x["size"], "requested_size": x["requested_size"],
                          "state": x["state"]}
                    bd["frames"] = b.stack(x["stack"]) if x["stack"] else b.empty
                blocks.append(bd)
            sd["blocks"] = blocks
            if not old and seg["stack"] is not None:
                sd["frames"] = b.stack(seg["stack"])  # gathered last, as py_symbolize does
            segs.append(sd)
    if version == "1.13":
        return segs
    traces = []
    for dev in model:
        tr = []
        for e in dev["trace"]:
            if version in ("2.0", "2.1") and e["action"] in ("segment_map", "segment_unmap"):
                continue
            te = {"action": e["action"]}
            if e["action"] == "oom":
                te["device_free"] = e["device_free"]
            else:
                te["addr"] = e["addr"]
            te["size"] = e["size"]
            te["stream"] = e["stream"]
            if has_time:
                te["time_us"] = e["time_us"]
            if version >= "2.6":
                te["compile_context"] = "N/A"
                te["user_metadata"] = ""
            if e["stack"] is not None:
                te["frames"] = b.stack(e["stack"])
            tr.append(te)
        traces.append(tr)
    out = {"segments": segs, "device_traces": traces}
    if version >= "2.3":
        out["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                     "max_split_size": -1, "garbage_collection_threshold": 0.0,
                                     "expandable_segments": True, "pinned_num_register_threads": 1,
                                     "release_lock_on_malloc": False, "pinned_use_host_register": False,
                                     "roundup_power2_divisions": {"1": 0, "2": 0}}
    if version >= "2.6":
        out["external_annotations"] = [{"device": 0, "stage": "START", "name": "step", "time_us": 1}]
        out["user_metadata"] = "vramguard fixture"
    return out


def model_version_filter(model, version):
    """1.13/2.0/2.1 had no expandable segments."""
    if version in ("1.13", "2.0", "2.1"):
        for dev in model:
            for seg in dev["segments"]:
                seg["expandable"] = False
                if version != "2.1":
                    seg["pool"] = (0, 0)
            dev["trace"] = [e for e in dev["trace"] if e["action"] not in ("segment_map", "segment_unmap")]
    return model


class cxx_pickle:
    """torch::jit::Pickler's protocol 2 (memory_snapshot.cpp's
    _memory_snapshot_pickled): ints as BININT or 8-byte LONG1, strings
    memoised by value, lists and dicts by identity, tuples with TUPLE."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")
        self.memo_ids = {}
        self.memo_str = {}
        self.n = 0

    def put(self):
        i = self.n
        self.n += 1
        self.out += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)
        return i

    def get(self, i):
        self.out += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)

    def dump(self, v):
        if v is None:
            self.out += b"N"
        elif v is True:
            self.out += b"\x88"
        elif v is False:
            self.out += b"\x89"
        elif isinstance(v, int):
            if -(1 << 31) <= v < (1 << 31):
                self.out += b"J" + struct.pack("<i", v)
            else:
                self.out += b"\x8a\x08" + struct.pack("<q", v)
        elif isinstance(v, float):
            self.out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            if v in self.memo_str:
                self.get(self.memo_str[v])
                return
            e = v.encode()
            self.out += b"X" + struct.pack("<I", len(e)) + e
            self.memo_str[v] = self.put()
        elif isinstance(v, tuple):
            self.out += b"("
            for x in v:
                self.dump(x)
            self.out += b"t"
        elif isinstance(v, (list, dict)):
            if id(v) in self.memo_ids:
                self.get(self.memo_ids[id(v)][0])
                return
            # EMPTY_LIST, MARK, the items, APPENDS; EMPTY_DICT, MARK, the
            # keys and values in turn, SETITEMS
            is_list = isinstance(v, list)
            self.out += b"]" if is_list else b"}"
            if v:
                self.out += b"("
                for x in v if is_list else (y for kv in v.items() for y in kv):
                    self.dump(x)
                self.out += b"e" if is_list else b"u"
            self.memo_ids[id(v)] = (self.put(), v)
        else:
            raise TypeError(type(v))

    def bytes(self, v):
        self.dump(v)
        self.out += b"."
        return bytes(self.out)


def write(out, name, data, tot):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    with open(os.path.join(out, name.rsplit(".", 1)[0] + ".totals.json"), "w") as f:
        json.dump(tot, f, indent=1, sort_keys=True)
        f.write("\n")


def fixtures(out):
    os.makedirs(out, exist_ok=True)
    weights = [5, 3, 8, 2, 1]
    cases = [
        # name, version, protocol, options
        ("v1_13_p2", "1.13", 2, {}),
        ("v2_0_p2", "2.0", 2, {}),
        ("v2_1_p4", "2.1", 4, {}),
        ("v2_2_p4", "2.2", 4, {}),
        ("v2_3_p5", "2.3", 5, {}),
        ("v2_6_p5", "2.6", 5, {}),
        # one allocator state in every form: Python's protocols 2 and 5, the
        # C++ writer's, JSON
        ("v2_6_p2", "2.6", 2, {"seed": "v2_6_p5"}),
        ("v2_6_cxx", "2.6", "cxx", {"seed": "v2_6_p5"}),
        ("v2_6_json", "2.6", "json", {"seed": "v2_6_p5"}),
        ("empty_device_p4", "2.6", 4, {"segs": [3, 0]}),
        ("huge_p5", "2.6", 5, {"huge": True}),
        ("no_oom_p4", "2.2", 4, {"oom": False, "expandable": False, "pools": False}),
        ("fragmented_p4", "2.6", 4, {"fragmented": True, "segs": [8, 1]}),
    ]
    for name, version, proto, opt in cases:
        rng = random.Random(opt.get("seed", name))
        segs = opt.get("segs", [5, 2])
        model = simulate(rng, len(segs), segs, 6, weights, oom=opt.get("oom", True),
                         expandable=opt.get("expandable", True), pools=opt.get("pools", True),
                         huge=opt.get("huge", False), fragmented=opt.get("fragmented", False))
        model = model_version_filter(model, version)
        b = Builder()
        snap = snapshot(model, version, b)
        if proto == "cxx":
            data = cxx_pickle().bytes(snap)
            fname = name + ".pickle"
        elif proto == "json":
            data = json.dumps(snap).encode()
            fname = name + ".json"
        else:
            data = pickle.dumps(snap, protocol=proto)
            fname = name + ".pickle"
        write(out, fname, data, totals(model, version))
    # A known leak: the same job at step 100 and at step 1000. train_step
    # keeps every step's loss tensor alive; everything else is the same.
    for name, leak in (("leak_step100", 4), ("leak_step1000", 40)):
        rng = random.Random("leak")
        model = simulate(rng, 1, [4], 6, weights, leak_blocks=leak, oom=False)
        snap = snapshot(model, "2.6", Builder())
        write(out, name + ".pickle", pickle.dumps(snap, protocol=4), totals(model, "2.6"))


def large(path, mb):
    """A snapshot of about mb megabytes: a long trace with deep stacks."""
    rng = random.Random("large")
    events = int(mb * 6600)
    model = simulate(rng, 1, [400], 24, [5, 3, 8, 2, 1], depth_extra=40, trace_events=events)
    snap = snapshot(model, "2.6", Builder())
    data = pickle.dumps(snap, protocol=4)
    write(os.path.dirname(os.path.abspath(path)), os.path.basename(path), data, totals(model, "2.6"))
    print(f"{path}: {len(data) / 1e6:.1f} MB, {sum(len(d['trace']) for d in model)} trace entries")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--large":
        large(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 100)
    else:
        fixtures(sys.argv[1] if len(sys.argv) > 1 else os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "internal", "snapshot", "testdata"))
