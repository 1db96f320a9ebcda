"""vramguard's in-process probe.

`vramguard run` starts it in every Python process of a job (through the
sitecustomize next to this package). In a notebook, `%load_ext vramguard`
starts it by hand; `vramguard python-path` prints the directory to put on
sys.path for that.

    import vramguard
    vramguard.step()      # count a training step in a loop without an optimizer
"""

from ._probe import PROTOCOL, VERSION, start, step, stop  # noqa: F401


def load_ipython_extension(ipython):
    """`%load_ext vramguard`: start the probe in this kernel."""
    start()


def unload_ipython_extension(ipython):
    """`%unload_ext vramguard`: stop sampling and close the connection."""
    stop()
