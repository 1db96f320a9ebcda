"""Reads each snapshot named on the command line with torch's own
torch.cuda._memory_viz (Debian's python3-torch) and prints, as JSON, what it
computes: stats() (segments, bytes by block state) and memory()'s flamegraph
lines summed by stream and state (the allocation stacks' real sizes where
the schema records history). The independent measure for the Go tests."""
import json
import pickle
import sys

from torch.cuda import _memory_viz


def read(path):
    with open(path, "rb") as f:
        if path.endswith(".json"):
            return json.load(f)
        return pickle.load(f)


out = {}
for path in sys.argv[1:]:
    snap = read(path)
    segs = snap if isinstance(snap, list) else snap["segments"]
    st = _memory_viz.stats(segs)
    lines = {}
    for line in _memory_viz.memory(segs, format_flamegraph=lambda s: s).splitlines():
        stack, size = line.rsplit(" ", 1)
        parts = stack.split(";")
        key = parts[0] + ";" + parts[1]
        if len(parts) > 2 and parts[2] == "<gaps>":
            key += ";gaps"
        lines[key] = lines.get(key, 0) + int(size)
    out[path] = {
        "stats": {k: (v.value if isinstance(v, _memory_viz.Bytes) else v) for k, v in st.items()},
        "memory": lines,
    }
json.dump(out, sys.stdout)
