"""The process's place in a distributed job: its rank as torch.distributed
knows it (a "dist" line, once), which the supervisor's ranks package reads
to name the rank that failed first."""

import os
import sys

from . import _state


def patch_default_pg():
    """Report the rank the moment the default process group is set:
    init_process_group calls distributed_c10d._update_default_pg (torch 1.x
    and 2.x), a one-line setter, so the rank is known even of a process that
    dies before the sampler's next tick. Nothing can raise inside it, so no
    traceback shows the wrapper."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    orig = getattr(c10d, "_update_default_pg", None)
    if orig is None or getattr(orig, "_vramguard", False):
        return

    def _update_default_pg(*args, **kwargs):
        result = orig(*args, **kwargs)
        try:
            p = _state.p
            if p is not None and p.pid == os.getpid():
                p.report_dist()
        except BaseException:
            pass
        return result

    _update_default_pg._vramguard = True
    _update_default_pg.__wrapped__ = orig
    c10d._update_default_pg = _update_default_pg


def view():
    """The process's rank as torch.distributed knows it, once the default
    process group exists; None before (or without torch.distributed)."""
    d = sys.modules.get("torch.distributed")
    if d is None:
        return None
    try:
        if not d.is_available() or not d.is_initialized():
            return None
        rank = int(d.get_rank())
        if rank < 0:
            return None
        msg = {"type": "dist", "rank": rank, "world_size": int(d.get_world_size())}
        try:
            msg["backend"] = str(d.get_backend())
        except Exception:
            pass
        local = os.environ.get("LOCAL_RANK", "").strip()
        if local.isdigit():
            msg["local_rank"] = int(local)
        return msg
    except Exception:
        return None
