"""The notebook side of vramguard, loaded once per kernel by either
extension (`%load_ext vramguard`, or vramguard.jupyter_notice that
`vramguard run --kernel` loads): the previous kernel's death notice, the
per-cell tracker, autosave, the kernel's shutdown requests told to the
supervisor, and the %vramguard magic. unload() removes every callback
load() registered."""

import os
import sys

from . import autosave, cells, shutdown

ENV_PREVIOUS_DEATH = "VRAMGUARD_PREVIOUS_DEATH"

_side = None


class Side:
    def __init__(self, shell):
        self.shell = shell
        # Read once, and removed, so processes the notebook starts do not inherit them.
        self.notice = os.environ.pop(ENV_PREVIOUS_DEATH, "")
        self.last_autosave = os.environ.pop(autosave.ENV_LAST, "")
        self.tracker = cells.Tracker(shell)
        self.notebook = autosave.notebook_path(shell.user_ns)
        self.autosave = autosave.Autosave(lambda: shell.user_ns, counter=lambda: getattr(shell, "execution_count", 0),
                                          notebook=self.notebook)
        self.tracker.listeners.append(self.autosave.after_cell)
        self.callbacks = []
        self.shutdown = None

    def show_notice(self, *_args, **_kwargs):
        # What a kernel prints before its first cell reaches only the
        # server's log; a cell's stderr reaches the notebook.
        msg, self.notice = self.notice, ""
        if not msg:
            return
        try:
            sys.stderr.write("vramguard: " + msg + "\n")
            sys.stderr.flush()
        except Exception:
            pass


def load(shell):
    global _side
    if _side is not None or shell is None:
        return
    from .magics import VramguardMagics

    side = Side(shell)
    side.callbacks = [
        ("pre_run_cell", side.show_notice),
        ("pre_run_cell", side.tracker.pre_run_cell),
        ("post_run_cell", side.tracker.post_run_cell),
    ]
    for ev, fn in side.callbacks:
        shell.events.register(ev, fn)
    shell.register_magics(VramguardMagics(shell, side))
    side.shutdown = shutdown.Watch(shell)
    _side = side


def unload(shell):
    global _side
    side, _side = _side, None
    if side is None:
        return
    for ev, fn in side.callbacks:
        try:
            shell.events.unregister(ev, fn)
        except ValueError:
            pass
    side.autosave.off()
    side.tracker.close()
    if side.shutdown is not None:
        side.shutdown.close()
    mm = getattr(shell, "magics_manager", None)
    if mm is not None:
        mm.magics.get("line", {}).pop("vramguard", None)
        mm.registry.pop("VramguardMagics", None)
