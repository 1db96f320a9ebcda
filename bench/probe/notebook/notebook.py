"""What the notebook side costs: per cell when nothing is printed, and the
`%vramguard who` scan over a namespace of about a million objects. Prints
one JSON line. Run by main.go with the probe on sys.path."""

import gc
import json
import statistics
import sys
import time

from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

cells_n = int(sys.argv[1])
objects_n = int(sys.argv[2])
rounds = int(sys.argv[3])

# History off: its SQLite writes would swamp a 'pass' cell's cost.
cfg = Config()
cfg.HistoryManager.enabled = False
ip = InteractiveShell.instance(config=cfg)
out = {}


def per_cell(n):
    t0 = time.perf_counter()
    for _ in range(n):
        ip.run_cell("pass", store_history=True)
    return (time.perf_counter() - t0) / n


import torch  # noqa: E402,F401  the tracker's torch-imported path (CUDA not initialised)

# Interleaved blocks, with and without the extension, so drift hits both.
off, on, hooks = [], [], []
from vramguard import notebook  # noqa: E402

for _ in range(rounds):
    off.append(per_cell(cells_n))
    notebook.load(ip)
    on.append(per_cell(cells_n))
    tr = notebook._side.tracker
    tr.threshold = 1 << 40  # nothing printed
    info = type("I", (), {"raw_cell": "pass", "silent": False})()
    res = type("R", (), {"error_in_exec": None, "error_before_exec": None})()
    t0 = time.perf_counter()
    for _ in range(cells_n):
        tr.pre_run_cell(info)
        tr.post_run_cell(res)
    hooks.append((time.perf_counter() - t0) / cells_n)
    notebook.unload(ip)
out["cell_off_us"] = statistics.median(off) * 1e6
out["cell_on_us"] = statistics.median(on) * 1e6
out["hooks_us"] = statistics.median(hooks) * 1e6
out["host_peak"] = tr.host.mode

# A namespace a long session leaves: a million small Python objects behind
# user names, a thousand tensors, a model.
notebook.load(ip)
ns = ip.user_ns
ns["rows"] = [{"id": i, "tags": [i]} for i in range(objects_n // 2)]
ns["tensors"] = [torch.zeros(16) for _ in range(1000)]
ns["model"] = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
gc.collect()
out["gc_objects"] = len(gc.get_objects())
from vramguard import holders  # noqa: E402

scans, cpus, baseline, loops = [], [], [], []
for _ in range(rounds):
    # The machine's speed at this moment: one Python pass over the rows.
    t0 = time.perf_counter()
    ids = set()
    for r in ns["rows"]:
        for v in r.values():
            if type(v) is not int:
                ids.add(id(v))
    loops.append(time.perf_counter() - t0)
    del ids
    t0, c0 = time.perf_counter(), time.process_time()
    rep = holders.scan(ip)
    scans.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
    # Side by side: finding the tensors gc can see (pytorch_memlab's way),
    # with no holder named.
    t0 = time.perf_counter()
    T = torch.Tensor
    found = [o for o in gc.get_objects() if issubclass(type(o), T)]
    baseline.append(time.perf_counter() - t0)
    del found
out["who_s"] = statistics.median(scans)
out["who_cpu_s"] = statistics.median(cpus)
out["gc_tensors_s"] = statistics.median(baseline)
out["loop_s"] = statistics.median(loops)
out["storages"] = sum(len(g["tensors"]) for g in rep["groups"])


# The same count of objects as instances of a class of the notebook's own
# (each with an int and a list), which the walk reads attribute by attribute.
class Row:
    def __init__(self, i):
        self.id = i
        self.tags = [i]


del ns["rows"]
ns["objs"] = [Row(i) for i in range(objects_n // 2)]
gc.collect()
out["gc_objects_objs"] = len(gc.get_objects())
scans, cpus = [], []
for _ in range(rounds):
    t0, c0 = time.perf_counter(), time.process_time()
    rep = holders.scan(ip)
    scans.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
out["who_objs_s"] = statistics.median(scans)
out["who_objs_cpu_s"] = statistics.median(cpus)

# Many small tensors: a training loop's `losses.append(loss)`, 100 000
# scalars. Side by side, what a user would otherwise run: a gc pass listing
# every tensor (no holder named), and one that also sums their storages.
del ns["objs"]
ns["losses"] = [torch.tensor(float(i)) for i in range(int(sys.argv[4]) if len(sys.argv) > 4 else 100000)]
gc.collect()
scans, cpus, bare, sized = [], [], [], []
for _ in range(rounds):
    t0, c0 = time.perf_counter(), time.process_time()
    rep = holders.scan(ip)
    scans.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
    t0 = time.perf_counter()
    found = [o for o in gc.get_objects() if torch.is_tensor(o)]
    bare.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    total = sum(t.untyped_storage().nbytes() if hasattr(t, "untyped_storage") else t.storage().nbytes() for t in found)
    sized.append(bare[-1] + time.perf_counter() - t0)
    del found
out["who_scalars_s"] = statistics.median(scans)
out["who_scalars_cpu_s"] = statistics.median(cpus)
out["scalars_named"] = sum(len(g["tensors"]) for g in rep["groups"] if g["holder"] == "losses")
out["gc_scalars_s"] = statistics.median(bare)
out["gc_scalars_sized_s"] = statistics.median(sized)
with open("/proc/loadavg") as f:
    out["load"] = float(f.read().split()[0])
print(json.dumps(out))
