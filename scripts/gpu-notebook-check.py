"""The notebook side's CUDA paths on a real GPU (run by scripts/gpu-check.sh):
per-cell allocated figures and peaks, the notebook's own
max_memory_allocated() kept across the per-cell resets, who's footer, and
free's empty_cache, each held against torch's own counters and the sizes
of the tensors. Prints PASS/FAIL lines and exits 1 on any FAIL.

    PYTHONPATH=$(vramguard python-path) python3 scripts/gpu-notebook-check.py
"""

import io
import json
import sys

from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

cfg = Config()
cfg.HistoryManager.enabled = False
ip = InteractiveShell.instance(config=cfg, colors="NoColor")
failed = []
MiB = 1 << 20


def cell(src):
    out, err = io.StringIO(), io.StringIO()
    so, se = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        ip.run_cell(src, store_history=True)
    finally:
        sys.stdout, sys.stderr = so, se
    return out.getvalue(), err.getvalue()


def check(name, ok, detail):
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail))
    if not ok:
        failed.append(name)


def last_json(s):
    return json.loads([l for l in s.splitlines() if l.startswith("{")][-1])


cell("%load_ext vramguard")
cell("import torch\ntorch.cuda.init()\nwarm = torch.ones(1, device='cuda')")
cell("%vramguard threshold 1MiB")
_, err = cell("a = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device='cuda')")
check("line after a 256 MiB cell", "+256 MiB allocated" in err, err.strip())
_, err = cell("tmp = torch.empty(1024 * 1024 * 1024, dtype=torch.uint8, device='cuda')\ndel tmp")
check("peak of a freed 1 GiB", "allocated (peak +1.0 GiB)" in err, err.strip())
tc = sys.modules["torch.cuda"]
cell("user_peak = torch.cuda.max_memory_allocated()")
want = ip.user_ns["a"].numel() + (1 << 30) + 512  # a, tmp, and warm's 512-byte block
check("max_memory_allocated() across the resets", ip.user_ns["user_peak"] >= want, "%d, at least %d" % (ip.user_ns["user_peak"], want))
cell("torch.cuda.reset_peak_memory_stats()\nafter_reset = torch.cuda.max_memory_allocated()")
check("the notebook's own reset", ip.user_ns["after_reset"] == tc.memory_allocated(), "%d == %d" % (ip.user_ns["after_reset"], tc.memory_allocated()))
cell("b = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device='cuda')")
cell("b")
cell("del b")
out, _ = cell("%vramguard who --json")
who = last_json(out)
foot = who["cuda"][0]
named = sum(t["bytes"] for g in who["groups"] for t in g["tensors"] if t["device"] == "cuda:0" and t["path"] != "<no name reaches it>")
st = tc.memory_stats(0)
check("footer allocated", foot["allocated_bytes"] == st["allocated_bytes.all.current"], "%d == %d" % (foot["allocated_bytes"], st["allocated_bytes.all.current"]))
check("footer named", foot["named_bytes"] == named and named >= 320 * MiB, "%d (a 256 MiB + Out 64 MiB + warm)" % named)
check("footer cache", foot["cache_bytes"] == st["reserved_bytes.all.current"] - st["allocated_bytes.all.current"], str(foot))
holders = {t["path"] for g in who["groups"] for t in g["tensors"]}
check("Out[n] holds the deleted b", any(p.startswith("Out[") for p in holders), sorted(holders))
r0 = tc.memory_reserved()
a0 = tc.memory_allocated()
out, _ = cell("%vramguard free --json")
steps = {s["step"]: s for s in last_json(out)["steps"]}
check("free --out returns Out's 64 MiB", steps["out"]["allocated_freed"] == 64 * MiB and a0 - tc.memory_allocated() == 64 * MiB, str(steps["out"]))
freed = sum(s["reserved_freed"] for s in steps.values())
check("empty_cache returns the cache", freed == r0 - tc.memory_reserved() and steps["empty_cache"]["reserved_freed"] > 0,
      "steps freed %d reserved, torch says %d; %s" % (freed, r0 - tc.memory_reserved(), steps["empty_cache"]))
check("a survives free", "a" in ip.user_ns and ip.user_ns["a"].is_cuda, "a still on cuda")
out, _ = cell("%vramguard")
check("status lists cuda:0", "cuda:0: allocated" in out, out.splitlines()[2] if len(out.splitlines()) > 2 else out)
sys.exit(1 if failed else 0)
