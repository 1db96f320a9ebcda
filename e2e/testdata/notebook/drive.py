"""Drive a kernel as a notebook client does, for the e2e tests.

    drive.py km KERNEL_NAME STEPS_JSON   a bare jupyter_client.KernelManager
    drive.py nb KERNEL_NAME CELLS_JSON   nbclient.NotebookClient on a notebook

km steps: {"run": CODE} executes a cell and records its stdout, stderr,
error name and execution count; {"until_dead": CODE} sends a cell and waits
for the kernel's process to end; {"restart": true} restarts the kernel on
the same connection file, as a client's restart does: with "wait" (the
client's shutdown_wait_time, seconds) by a shutdown_request, SIGTERM after
half the wait and SIGKILL after all of it, as Jupyter's own restart does;
without, by killing it at once. nb runs the cells as
one notebook (papermill's and nbconvert --execute's way) and records the
outputs of each. Prints one JSON object on stdout.
"""

import json
import sys
import time


def drive_km(kernel, steps):
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name=kernel)
    km.start_kernel()
    # a step that fails (a timeout) still ends the kernel: one left running
    # would hold this process's output pipes after it exits
    kc = km.client()
    done = False
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        out = {"connection_file": km.connection_file, "steps": []}
        for st in steps:
            if "run" in st:
                res = {"stdout": "", "stderr": "", "error": None, "execution_count": None}

                def hook(msg, res=res):
                    t, c = msg["msg_type"], msg["content"]
                    if t == "stream":
                        res[c["name"]] += c["text"]
                    elif t == "error":
                        res["error"] = c["ename"]
                        res["stderr"] += "%s: %s\n" % (c["ename"], c["evalue"])
                    elif t == "execute_input":
                        res["execution_count"] = c["execution_count"]

                kc.execute_interactive(st["run"], output_hook=hook, timeout=st.get("timeout", 60))
                out["steps"].append(res)
            elif "until_dead" in st:
                kc.execute(st["until_dead"])
                deadline = time.time() + st.get("timeout", 60)
                while km.is_alive() and time.time() < deadline:
                    time.sleep(0.05)
                out["steps"].append({"dead": not km.is_alive()})
            elif st.get("restart"):
                if "wait" in st:
                    km.shutdown_wait_time = st["wait"]
                    km.restart_kernel(now=False)
                else:
                    km.restart_kernel(now=True)
                kc.wait_for_ready(timeout=st.get("ready_timeout", 60))
                out["steps"].append({"restarted": True})
        done = True
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=not done)
    print(json.dumps(out))


def drive_nb(kernel, cells):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    NotebookClient(nb, kernel_name=kernel, timeout=60).execute()
    out = []
    for c in nb.cells:
        text = {"stdout": "", "stderr": ""}
        for o in c.outputs:
            if o.get("output_type") == "stream":
                text[o["name"]] += o["text"]
        out.append({"execution_count": c.get("execution_count"), **text})
    print(json.dumps({"cells": out}))


if __name__ == "__main__":
    mode, kernel, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    {"km": drive_km, "nb": drive_nb}[mode](kernel, spec)
