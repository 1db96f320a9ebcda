"""Drives the notebook side in a bare IPython InteractiveShell, as a kernel
runs cells, and prints one JSON line of facts for the Go test to check:
each cell's stdout and stderr, the process's VmRSS read from
/proc/self/status around it, sizes computed from the tensors, and the
scripted allocator's own counters.

    notebook_shell.py SCENARIO [DIR]     (cpu, notorch, sampler, cuda, autosave)
"""

import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
scenario = sys.argv[1]
workdir = sys.argv[2] if len(sys.argv) > 2 else ""

if scenario == "cuda":
    sys.path.insert(0, os.path.join(here, "..", "fakecuda"))
    import scripted

    scripted.install()

import shell_rig  # noqa: E402

ip = shell_rig.shell()
facts = {"pid": os.getpid(), "cells": []}


def vmrss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cell(src):
    before = vmrss()
    r, out, err = shell_rig.captured(ip, src)
    rec = {"n": r.execution_count, "src": src, "stdout": out, "stderr": err,
           "rss_before": before, "rss_after": vmrss(), "ok": r.success}
    facts["cells"].append(rec)
    return rec


def last_json(rec):
    lines = [l for l in rec["stdout"].splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


if scenario == "lastautosave":
    # An earlier kernel's autosave, and the variable run --kernel would set
    # for the next kernel, before the extension loads.
    import torch

    torch.manual_seed(7)
    m = torch.nn.Linear(8, 4)
    last = os.path.join(workdir, "autosave-20260101-000000-3.pt")
    torch.save({"vramguard_autosave": 1, "saved_at": 1767225600, "objects": {"model": m.state_dict()}}, last)
    facts["saved_weight"] = m.weight.flatten().tolist()
    facts["last"] = last
    os.environ["VRAMGUARD_LAST_AUTOSAVE"] = last
    del m

if scenario == "cpu":
    class FakeKernel:
        """ipykernel's do_shutdown, which its shutdown_request calls."""

        def do_shutdown(self, restart):
            return {"status": "ok", "restart": restart}

    ip.kernel = FakeKernel()

cell("%load_ext vramguard")

if scenario == "cpu":
    cell("import torch")
    cell("x = torch.ones(96 << 20, dtype=torch.uint8)")
    cell("y = torch.ones(32 << 20, dtype=torch.uint8); y")
    cell("del y")
    cell("v = x[::2]")
    cell("def f():\n    t = torch.ones(40 << 20, dtype=torch.uint8)\n    1 / 0\nf()")
    cell("model = torch.nn.Sequential(torch.nn.Linear(64, 64))\nopt = torch.optim.Adam(model.parameters())\n"
         "model(torch.ones(2, 64)).sum().backward()\nopt.step()")
    cell("def make():\n    buf = torch.ones(1 << 20, dtype=torch.uint8)\n    return lambda: buf\nget = make()")
    cell("model.register_forward_hook((lambda kept: (lambda m, i, o: kept))(torch.ones(3 << 19, dtype=torch.uint8)))")
    facts["who"] = last_json(cell("%vramguard who --json"))
    facts["who_text"] = cell("%vramguard who")["stdout"]
    fr = cell("%vramguard free --json")
    facts["free"] = last_json(fr)
    facts["free_rss_drop"] = fr["rss_before"] - fr["rss_after"]
    facts["who_after"] = last_json(cell("%vramguard who --json"))
    ns = ip.user_ns
    facts["sizes"] = {k: ns[k].element_size() * ns[k].nelement() for k in ("x",)}
    facts["x_sum_after_free"] = int(ns["x"].sum().item())
    facts["cells_json"] = last_json(cell("%vramguard cells --json"))
    facts["cells_text"] = cell("%vramguard cells")["stdout"]
    cell("%vramguard quiet")
    facts["quiet"] = cell("z = torch.ones(96 << 20, dtype=torch.uint8)")
    cell("%vramguard verbose")
    facts["verbose"] = cell("1 + 1")
    cell("%vramguard threshold 1GiB")
    facts["threshold"] = cell("w = torch.ones(96 << 20, dtype=torch.uint8)")
    facts["status"] = cell("%vramguard")
    facts["help"] = cell("%vramguard --help")
    facts["pinfo"] = cell("%vramguard?")
    facts["free_steps"] = {f: [st["step"] for st in last_json(cell("%%vramguard free %s --json" % f))["steps"]]
                           for f in ("--out", "--tb", "--cache")}
    facts["errors"] = [cell(c) for c in ("%vramguard bogus", "%vramguard threshold lots", "%vramguard who --bogus",
                                         "%vramguard autosave nothing_here", "%vramguard restore /nonexistent")]
    facts["do_shutdown"] = ip.kernel.do_shutdown(True)
    cell("%unload_ext vramguard")
    facts["after_unload"] = {"callbacks": sum(len(ip.events.callbacks[e]) for e in ("pre_run_cell", "post_run_cell")),
                             "magic": "vramguard" in ip.magics_manager.magics["line"],
                             "do_shutdown_wrapped": "do_shutdown" in vars(ip.kernel)}
elif scenario in ("notorch", "sampler"):
    if scenario == "sampler":
        from vramguard import cells, notebook

        notebook._side.tracker.host = cells.Host(mode="sampler")
    cell("keep = b'x' * (100 << 20)")
    # In pieces: a thread (the sampler) runs between them, as it would
    # during a cell that builds data in Python.
    cell("tmp = [b'x' * (1 << 20) for _ in range(200)]\ndel tmp")
    facts["who_cell"] = cell("%vramguard who")
    facts["status"] = cell("%vramguard")
    facts["torch_imported"] = "torch" in sys.modules
elif scenario == "cuda":
    cell("%vramguard threshold 1MiB")
    cell("import torch, scripted")
    cell("a = scripted.tensor(8 << 20)")
    cell("b = scripted.tensor(16 << 20)\ndel b")
    cell("user_peak = torch.cuda.max_memory_allocated()")
    facts["true_peak"] = scripted.true_peak()
    facts["user_peak"] = ip.user_ns["user_peak"]
    cell("torch.cuda.reset_peak_memory_stats()\nafter_reset = torch.cuda.max_memory_allocated()")
    facts["after_reset"] = ip.user_ns["after_reset"]
    facts["allocated_at_reset"] = 8 << 20
    cell("scripted.alloc(3 << 20)")
    cell("c = scripted.tensor(4 << 20); c")
    cell("del c")
    facts["who"] = last_json(cell("%vramguard who --json"))
    facts["who_text"] = cell("%vramguard who")["stdout"]
    facts["before_free"] = scripted.counters()
    facts["free"] = last_json(cell("%vramguard free --json"))
    facts["after_free"] = scripted.counters()
    facts["status"] = cell("%vramguard")
    facts["free_text"] = cell("%vramguard free")["stdout"]
elif scenario == "autosave":
    d = os.path.join(workdir, "saves")
    cell("import torch\ntorch.manual_seed(1)\n"
         "model = torch.nn.Linear(8, 4)\nopt = torch.optim.Adam(model.parameters(), lr=0.01)\n"
         "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)\n"
         "def train(n):\n    for _ in range(n):\n        opt.zero_grad()\n"
         "        model(torch.ones(3, 8)).pow(2).sum().backward()\n        opt.step()\n        sched.step()\n"
         "train(3)")
    facts["enable"] = cell("%%vramguard autosave model opt sched --every 0.2s --dir %s --keep 2" % d)
    # One long cell that trains: autosaves come at its optimizer steps, not
    # only when it ends.
    facts["train"] = cell(
        "import os, time\nfrom vramguard import notebook\nside = notebook._side.autosave\nstart = side.saves\n"
        "deadline = time.monotonic() + 10\n"
        "while side.saves < start + 3 and time.monotonic() < deadline:\n    train(1)\n    time.sleep(0.01)\n"
        "in_cell = side.saves - start\nprint('saves in the cell', in_cell)")
    facts["in_cell_saves"] = ip.user_ns["in_cell"]
    facts["files"] = sorted(os.listdir(d))
    # A save at a known point (enabling saves at once), its state kept to
    # hold the restore against.
    import copy

    ip.user_ns["copy"] = copy
    cell("%%vramguard autosave model opt sched --every 10m --dir %s --keep 2\n"
         "ref = {'model': {k: v.clone() for k, v in model.state_dict().items()},\n"
         "       'opt': copy.deepcopy(opt.state_dict()), 'sched': copy.deepcopy(sched.state_dict())}\n"
         "%%vramguard autosave off" % d)
    facts["status_off"] = cell("%vramguard autosave status")
    import torch

    # A model-only save loads with torch's own weights_only reader on every
    # torch version (1.13's has no floats, which an optimizer's lr is).
    only = os.path.join(workdir, "only")
    cell("%%vramguard autosave model --dir %s" % only)
    mo = os.path.join(only, os.listdir(only)[0])
    loaded = torch.load(mo, weights_only=True)
    facts["weights_only"] = {"keys": sorted(loaded), "format": loaded["vramguard_autosave"],
                             "objects": sorted(loaded["objects"]),
                             "equal": all(torch.equal(loaded["objects"]["model"][k], v)
                                          for k, v in ip.user_ns["model"].state_dict().items())}
    cell("%vramguard autosave off")
    # Scramble the live objects, then restore the newest save into them.
    cell("train(5)\nwith torch.no_grad():\n    model.weight.add_(1)")
    facts["restore"] = cell("%%vramguard restore %s" % d)
    cell("import json\nsd = opt.state_dict()\n"
         "same_model = all(torch.equal(ref['model'][k], v) for k, v in model.state_dict().items())\n"
         "same_opt = all(torch.equal(ref['opt']['state'][i][k], sd['state'][i][k]) for i in ref['opt']['state'] "
         "for k in ref['opt']['state'][i]) and ref['opt']['param_groups'] == sd['param_groups']\n"
         "same_sched = sched.state_dict() == ref['sched']")
    facts["same"] = {k: ip.user_ns[k] for k in ("same_model", "same_opt", "same_sched")}
    facts["tmpfs"] = cell("%%vramguard autosave model --dir /dev/shm/vramguard-test-%d" % os.getpid())
    cell("%vramguard autosave off")
    facts["unwritable"] = cell("%vramguard autosave model --dir /proc/vramguard-cannot")
    facts["no_last"] = cell("%vramguard restore")
elif scenario == "freeexec":
    # The last exception was raised in code run by exec() with the
    # notebook's own dict as its locals: free clears frames, never that dict.
    cell("import torch\ncfg = {'lr': 0.1}\n"
         "exec('t = torch.ones(8 << 20, dtype=torch.uint8)\\n1 / 0', {'torch': torch}, cfg)")
    fr = cell("%vramguard free --tb --json")
    facts["free"] = last_json(fr)
    facts["cfg_keys"] = sorted(ip.user_ns["cfg"])
elif scenario == "lastautosave":
    # VRAMGUARD_LAST_AUTOSAVE was set by the test, as run --kernel sets it.
    facts["env_after_load"] = os.environ.get("VRAMGUARD_LAST_AUTOSAVE")
    cell("import torch\ntorch.manual_seed(123)\nmodel = torch.nn.Linear(8, 4)")
    facts["restore"] = cell("%vramguard restore")
    facts["status"] = cell("%vramguard")
    cell("w = model.weight.detach().clone()")
    facts["weight"] = ip.user_ns["w"].flatten().tolist()

print(json.dumps(facts))
