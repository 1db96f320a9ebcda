"""Drives the %vramguard magics in a real ipykernel started by
jupyter_client's KernelManager under `vramguard run --kernel` (the
kernelspec in $JUPYTER_PATH), as a notebook client does, and prints one
JSON line of facts: each cell's outputs, the kernel's VmRSS read from
/proc/PID/status around `free`, and the restore after a SIGKILL.

    magics_kernel.py KERNEL_NAME WORKDIR
"""

import json
import os
import signal
import sys
import time
import uuid

from jupyter_client import KernelManager

name, work = sys.argv[1], sys.argv[2]
facts = {"cells": []}


def vmrss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start(km):
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return kc


def run(kc, code, timeout=120):
    out = {"src": code, "stdout": "", "stderr": "", "result": None, "error": None}

    def hook(msg):
        t, c = msg["header"]["msg_type"], msg["content"]
        if t == "stream":
            out[c["name"]] += c["text"]
        elif t == "execute_result":
            out["result"] = c["data"].get("text/plain")
            out["count"] = c["execution_count"]
        elif t == "error":
            out["error"] = c["ename"]

    reply = kc.execute_interactive(code, output_hook=hook, timeout=timeout)
    out["count"] = reply["content"].get("execution_count")
    facts["cells"].append(out)
    return out


def last_json(cell):
    lines = [l for l in cell["stdout"].splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


saves = os.path.join(work, "saves")
km = KernelManager(kernel_name=name)
km.connection_file = os.path.join(os.environ["JUPYTER_RUNTIME_DIR"], "kernel-%s.json" % uuid.uuid4())
kc = start(km)
try:
    run(kc, "%load_ext vramguard")
    pid = int(run(kc, "import os, torch\nos.getpid()")["result"])
    facts["pid"] = pid
    run(kc, "x = torch.ones(48 << 20, dtype=torch.uint8)")
    facts["shown"] = run(kc, "x")
    run(kc, "del x")
    facts["raised"] = run(kc, "def f():\n    t = torch.ones(40 << 20, dtype=torch.uint8)\n    1 / 0\nf()")
    run(kc, "keep = torch.ones(16 << 20, dtype=torch.uint8)")
    facts["who"] = last_json(run(kc, "%vramguard who --json"))
    facts["who_text"] = run(kc, "%vramguard who")["stdout"]
    before = vmrss(pid)
    fr = run(kc, "%vramguard free --json")
    facts["free"] = last_json(fr)
    facts["free_text"] = fr
    facts["free_rss_drop"] = before - vmrss(pid)
    facts["keep_sum"] = int(run(kc, "int(keep.sum())")["result"])
    facts["status"] = run(kc, "%vramguard")
    run(kc, "torch.manual_seed(3)\nmodel = torch.nn.Linear(16, 8)\nopt = torch.optim.Adam(model.parameters())\n"
            "for _ in range(4):\n    opt.zero_grad()\n    model(torch.ones(2, 16)).sum().backward()\n    opt.step()")
    facts["autosave"] = run(kc, "%%vramguard autosave model opt --every 10m --dir %s" % saves)
    run(kc, "torch.save({'model': model.state_dict(), 'opt': opt.state_dict()}, %r)" % os.path.join(work, "ref.pt"))
    facts["files"] = sorted(os.listdir(saves))
    # The kernel dies the way the OOM killer kills: SIGKILL, no goodbye.
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while km.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    kc.stop_channels()
    km.restart_kernel(now=True)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    facts["first_after_restart"] = run(kc, "%load_ext vramguard")
    facts["pid2"] = int(run(kc, "import os, torch\nos.getpid()")["result"])
    run(kc, "torch.manual_seed(99)\nmodel = torch.nn.Linear(16, 8)\nopt = torch.optim.Adam(model.parameters())")
    facts["restore"] = run(kc, "%%vramguard restore %s" % saves)
    facts["same"] = json.loads(run(kc, (
        "import json\nref = torch.load(%r)\nsd = opt.state_dict()\n"
        "print(json.dumps({'model': all(torch.equal(ref['model'][k], v) for k, v in model.state_dict().items()),\n"
        "  'opt': all(torch.equal(ref['opt']['state'][i][k], sd['state'][i][k]) for i in ref['opt']['state'] for k in ref['opt']['state'][i])\n"
        "         and len(sd['state']) == len(ref['opt']['state']) == 2 and ref['opt']['param_groups'] == sd['param_groups']}))"
    ) % os.path.join(work, "ref.pt"))["stdout"].strip().splitlines()[-1])
except Exception as e:
    facts["exception"] = "%s: %s" % (type(e).__name__, e)
finally:
    try:
        kc.stop_channels()
    except Exception:
        pass
    km.shutdown_kernel(now=True)

print(json.dumps(facts))
