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


def __getattr__(name):
    """vramguard.autosave: the autosave module, imported on first use (the
    probe's start-up in every process does not pay for it), and callable:
    vramguard.autosave(model=..., opt=..., dir=...) keeps a training
    script's objects saved (vramguard.script_autosave)."""
    if name == "autosave":
        import importlib

        return importlib.import_module(".autosave", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


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
