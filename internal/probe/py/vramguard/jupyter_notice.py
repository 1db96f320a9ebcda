"""The extension `vramguard run --kernel` loads into a kernel (through the
kernel's command line, as
`--IPKernelApp.extra_extensions=vramguard.jupyter_notice`): the whole
notebook side (vramguard.notebook), of which the first piece is the line
saying why the notebook's previous kernel died. run --kernel puts that line
in VRAMGUARD_PREVIOUS_DEATH; it is written to stderr when the first cell
runs, once, and the variable is removed so processes the notebook starts do
not inherit it.
"""

from . import notebook


def load_ipython_extension(ipython):
    notebook.load(ipython)


def unload_ipython_extension(ipython):
    notebook.unload(ipython)
