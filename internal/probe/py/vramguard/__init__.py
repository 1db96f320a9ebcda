"""vramguard's in-process probe.

`vramguard run` starts it in every Python process of a job (through the
sitecustomize next to this package). In a notebook, `%load_ext vramguard`
starts it by hand with the notebook side (%vramguard, a line after each
cell that moved memory; docs/JUPYTER.md); `vramguard python-path` prints
the directory to put on sys.path for that.

    import vramguard
    vramguard.step()      # count a training step in a loop without an optimizer
    vramguard.autosave(model=model, opt=opt, dir="ckpt/", every="30m")
                          # save them at optimizer steps, and on the scheduler's warning
"""

from ._probe import PROTOCOL, VERSION, start, step, stop  # noqa: F401


def autosave(**kw):
    """Keep a training script's objects saved (vramguard.script_autosave);
    imported on first use, so the probe's start-up in every process does
    not pay for it."""
    from . import script_autosave

    return script_autosave.autosave(**kw)


def load_ipython_extension(ipython):
    """`%load_ext vramguard`: start the probe in this kernel and load the
    notebook side (the per-cell line, %vramguard; see vramguard.notebook)."""
    start()
    from . import notebook

    notebook.load(ipython)


def unload_ipython_extension(ipython):
    """`%unload_ext vramguard`: remove the notebook side's callbacks and
    magic, stop sampling and close the connection."""
    from . import notebook

    notebook.unload(ipython)
    stop()
