"""Reference reader of CUDA memory snapshots for vramguard's tests.

It loads each snapshot with a pickle.Unpickler that refuses every class
(find_class raises), so nothing a file names is looked up or run, and
prints as JSON what the tests compare vramguard's reading with:

  refsnap.py figures FILE...   per device: reserved, allocated, active,
                               requested bytes, segments, blocks, trace
                               entries; at the last OOM of a device's trace,
                               the allocator's state replayed back to it
  refsnap.py at FILE DEV I... the state replayed back to just before
                               trace entry I of device DEV
  refsnap.py same ORIG EXPORT... the differences between each snapshot ORIG
                               (what the restricted pickle.load gives, a
                               tuple equal to a list) and the
                               JSON file EXPORT, each by its path; the
                               compact form (vramguard_frames,
                               vramguard_stacks) is resolved first

  refsnap.py viz FILE OUT       writes the page torch's memory_viz writes of
                               the snapshot FILE (_memory_viz._format_viz:
                               the pickle embedded in base64)

A memory_viz HTML page (the pickle embedded in base64) is read too.
"""

import base64
import io
import json
import pickle
import re
import sys

SMALL_ALLOC = 1 << 20  # the allocator's small pool: requests up to 1 MiB
SMALL_SEGMENT = 2 << 20  # a small-pool segment


class Refuse(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused: global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused: persistent id")


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data.lstrip()[:1] == b"<":
        m = re.search(rb'"base64":\s*"([A-Za-z0-9+/=]*)"', data)
        data = base64.b64decode(m.group(1))
    if data[:1] in (b"{", b"["):
        return json.loads(data)
    return Refuse(io.BytesIO(data)).load()


def segments_of(snap):
    return snap if isinstance(snap, list) else snap.get("segments", [])


def traces_of(snap):
    return [] if isinstance(snap, list) else snap.get("device_traces", [])


def requested(block):
    if "requested_size" in block:
        return block["requested_size"]
    hist = block.get("history") or []
    if hist:
        return hist[-1]["real_size"]
    return block["size"]


def site(frames):
    """The frame a stack is charged to: the innermost Python frame whose
    path (either slash) has no torch directory, else the innermost Python
    frame."""
    py = [f for f in frames or [] if f["filename"].endswith(".py")]
    for f in py:
        parts = f["filename"].replace("\\", "/").split("/")
        if "torch" not in parts[:-1]:
            return f"{f['filename']}:{f['line']} {f['name']}"
    if py:
        return f"{py[0]['filename']}:{py[0]['line']} {py[0]['name']}"
    return "?"


def block_frames(block):
    if block.get("frames"):
        return block["frames"]
    hist = block.get("history") or []
    return hist[-1].get("frames") if hist else None


def figures(snap):
    segs, traces = segments_of(snap), traces_of(snap)
    ndev = max([s["device"] + 1 for s in segs] + [len(traces)])
    devs = {}
    for d in range(ndev):
        devs[d] = dict(reserved=0, allocated=0, active=0, requested=0, segments=0, blocks=0, sites={},
                       trace_entries=len(traces[d]) if d < len(traces) else 0)
    for s in segs:
        f = devs[s["device"]]
        f["segments"] += 1
        for b in s["blocks"]:
            f["blocks"] += 1
            f["reserved"] += b["size"]
            if b["state"] == "active_allocated":
                f["allocated"] += b["size"]
                f["requested"] += requested(b)
                st = f["sites"].setdefault(site(block_frames(b)), [0, 0])
                st[0] += b["size"]
                st[1] += 1
            if b["state"] in ("active_allocated", "active_pending_free"):
                f["active"] += b["size"]
    for d, tr in enumerate(traces):
        ooms = [i for i, e in enumerate(tr) if e["action"] == "oom"]
        if ooms:
            devs[d]["oom"] = at_oom(segs, d, tr, ooms[-1])
    return {str(d): f for d, f in devs.items()}


def at_oom(segs, dev, trace, index):
    """The device's allocator state just before trace[index], an oom entry:
    the state at the dump with every later event undone."""
    # reserved ranges: [start, end, stream, pool, expandable, large]
    ranges = []
    live = {}  # address -> [size, state]
    for s in segs:
        if s["device"] != dev:
            continue
        pool = tuple(s.get("segment_pool_id", (0, 0)))
        ranges.append([s["address"], s["address"] + s["total_size"], s["stream"], pool,
                       bool(s.get("is_expandable")), s["segment_type"] == "large"])
        addr = s["address"]
        for b in s["blocks"]:
            a = b.get("address", addr)
            if b["state"] != "inactive":
                live[a] = [b["size"], b["state"]]
            addr = a + b["size"]

    def cut(lo, hi):
        out = []
        for r in ranges:
            if r[1] <= lo or r[0] >= hi:
                out.append(r)
                continue
            if r[0] < lo:
                out.append([r[0], lo] + r[2:])
            if r[1] > hi:
                out.append([hi, r[1]] + r[2:])
        ranges[:] = out

    def like(addr):
        for r in ranges:
            if r[1] == addr or r[0] == addr:
                return r[2:]
        return None

    for e in reversed(trace[index + 1:]):
        act, a, n = e["action"], e.get("addr", 0), e.get("size", 0)
        if act == "alloc":
            live.pop(a, None)
        elif act == "free_requested":
            if a in live:
                live[a][1] = "active_allocated"
        elif act == "free_completed":
            live[a] = [n, "active_pending_free"]
        elif act in ("segment_alloc", "segment_map"):
            cut(a, a + n)
        elif act == "segment_free":
            ranges.append([a, a + n, e["stream"], (0, 0), False, n > SMALL_SEGMENT])
        elif act == "segment_unmap":
            attrs = like(a) or like(a + n) or [e["stream"], (0, 0), True, n > SMALL_SEGMENT]
            ranges.append([a, a + n] + list(attrs))
    ranges.sort()
    oom = trace[index]
    want_large = oom.get("size", 0) > SMALL_ALLOC
    # free pieces: each range less the live blocks in it, joined across
    # neighbouring ranges of one expandable segment
    starts = sorted(live)
    pieces = []  # [start, end, attrs]
    for r in ranges:
        pos = r[0]
        for a in starts:
            if a + live[a][0] <= r[0] or a >= r[1]:
                continue
            if a > pos:
                pieces.append([pos, a, r])
            pos = max(pos, a + live[a][0])
        if pos < r[1]:
            pieces.append([pos, r[1], r])
    joined = []
    for p in pieces:
        if joined and joined[-1][1] == p[0] and joined[-1][2][4] and p[2][4] and joined[-1][2][2:4] == p[2][2:4]:
            joined[-1][1] = p[1]
        else:
            joined.append(list(p))
    largest = largest_ok = 0
    for lo, hi, r in joined:
        largest = max(largest, hi - lo)
        if r[2] == oom["stream"] and tuple(r[3]) == (0, 0) and r[5] == want_large:
            largest_ok = max(largest_ok, hi - lo)
    reserved = sum(r[1] - r[0] for r in ranges)
    allocated = sum(n for n, st in live.values() if st == "active_allocated")
    pending = sum(n for n, st in live.values() if st == "active_pending_free")
    return dict(index=index, site=site(oom.get("frames")), size=oom.get("size", 0), device_free=oom.get("device_free", 0), stream=oom["stream"],
                reserved=reserved, allocated=allocated, pending_free=pending,
                cached_free=reserved - allocated - pending, largest_free=largest, largest_usable_free=largest_ok,
                streams=len({r[2] for r in ranges}), private_pools=len({tuple(r[3]) for r in ranges} - {(0, 0)}))


def resolve(export):
    """The compact form with each {"vramguard_stack": N} replaced by stack
    N of its table, each of whose frames is an index into vramguard_frames."""
    if not isinstance(export, dict) or "vramguard_stacks" not in export:
        return export
    frames = export.pop("vramguard_frames")
    table = [[frames[i] for i in stack] for stack in export.pop("vramguard_stacks")]

    def walk(v):
        if isinstance(v, dict):
            if list(v) == ["vramguard_stack"]:
                return table[v["vramguard_stack"]]
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(export)


def differences(a, b, path="", out=None):
    out = [] if out is None else out
    if len(out) >= 20:
        return out
    if path.endswith("/frames") and a == b:
        return out  # frames hold str and int only: == is exact there, and quick
    if isinstance(a, tuple):
        a = list(a)  # JSON has lists only
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            if k not in b:
                out.append(f"{path}/{k}: lost")
            elif k not in a:
                out.append(f"{path}/{k}: added")
            else:
                differences(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items, exported {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            differences(x, y, f"{path}/{i}", out)
    elif a != b or type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        out.append(f"{path}: {a!r}, exported {b!r}")
    return out


# torch.cuda._memory_viz's _memory_viz_template (torch 2.2 and later)
VIZ_TEMPLATE = r"""
<!DOCTYPE html>
<html>
<head>
</head>
<body>
<script type="module">
import {add_local_files} from "https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"
const local_files = $SNAPSHOT
add_local_files(local_files, $VIZ_KIND)
</script>
</body>
"""


def viz(snapshot):
    """The page of _memory_viz._format_viz(snapshot, "Active Memory Timeline", None)."""
    buffer = pickle.dumps(snapshot)
    buffer += b"\x00" * (3 - len(buffer) % 3)
    encoded = base64.b64encode(buffer).decode("utf-8")
    files = json.dumps([{"name": "snapshot.pickle", "base64": encoded}])
    return VIZ_TEMPLATE.replace("$VIZ_KIND", repr("Active Memory Timeline")).replace("$SNAPSHOT", files)


def main():
    mode, paths = sys.argv[1], sys.argv[2:]
    if mode == "figures":
        json.dump({p: figures(load(p)) for p in paths}, sys.stdout)
    elif mode == "at":
        snap, dev = load(paths[0]), int(paths[1])
        tr = traces_of(snap)[dev]
        json.dump([at_oom(segments_of(snap), dev, tr, int(i)) for i in paths[2:]], sys.stdout)
    elif mode == "viz":
        with open(paths[1], "w") as f:
            f.write(viz(load(paths[0])))
        json.dump(paths[1], sys.stdout)
    elif mode == "same":
        out = {}
        for o, e in zip(paths[::2], paths[1::2]):
            orig = load(o)
            with open(e, "rb") as f:
                out[o] = differences(orig, resolve(json.load(f)))
        json.dump(out, sys.stdout)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
