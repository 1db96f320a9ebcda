"""Say in the notebook why the notebook's previous kernel died.

`vramguard run --kernel` loads this IPython extension into a kernel whose
predecessor died (through the kernel's command line, as
`--IPKernelApp.extra_extensions=vramguard.jupyter_notice`) and puts the
line to show in VRAMGUARD_PREVIOUS_DEATH. The line is written to stderr
when the first cell runs: ipykernel sends a cell's output to the notebook,
while what a kernel prints before any cell reaches only the server's log.
It is shown once, and the variable is removed so processes the notebook
starts do not inherit it.
"""

import os
import sys

ENV = "VRAMGUARD_PREVIOUS_DEATH"


def load_ipython_extension(ipython):
    message = os.environ.pop(ENV, "")
    if not message:
        return
    shown = []

    def notice(*_args, **_kwargs):
        if shown:
            return
        shown.append(True)
        try:
            sys.stderr.write("vramguard: " + message + "\n")
            sys.stderr.flush()
        except Exception:
            pass

    ipython.events.register("pre_run_cell", notice)


def unload_ipython_extension(ipython):
    pass
