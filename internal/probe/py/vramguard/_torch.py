"""torch, patched the moment its import has finished: the optimizer's step
hook, the rank's report, the spawn child's exception, the OOM hooks queued
for when the job initialises CUDA, and torch.save (events, --atomic-save).

Until then the probe costs a process nothing but a dormant import hook
(_TorchFinder). Whichever sees the end of torch's import first patches it:
the marked spec (the import system's "done importing" step), the probe's
start when torch was imported before it, or the sampler's safety net.
"""

import sys
import threading

from . import _state, _steps

done = False  # torch patched (or deliberately left alone)
_lock = threading.Lock()


def install_finder():
    """Watch for `import torch`, unless torch is imported already."""
    if "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchFinder())


def after_fork_child():
    global _lock
    _lock = threading.Lock()


def on_torch_imported(torch):
    global done
    if not _lock.acquire(blocking=False):
        return  # the other path (import hook or sampler) is doing it
    try:
        if done:
            return
        done = True
    finally:
        _lock.release()
    p = _state.p
    if p is None:
        return
    try:
        if p.reporting():
            from . import _dist, _oom, _uncaught

            _uncaught.patch_spawn_report()
            _dist.patch_default_pg()
            hook = _steps.patch_optimizer()
            p.send({"type": "torch", "version": str(getattr(torch, "__version__", "")), "step_hook": hook})
            _oom.queue_cuda_init(torch)
        if p.reporting() or p.cfg.atomic_save:
            from . import _save

            _save.patch_save(torch)
    except BaseException as e:
        p.fail("torch", e)


def initializing(mod):
    spec = getattr(mod, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class _TorchFinder:
    """Finds nothing itself. When `torch` is imported it marks torch's spec so
    the probe patches torch the moment its import has finished.

    The import system sets spec._initializing = False once exec_module has
    returned (or raised); the marked spec runs the patch there. Nothing of the
    probe sits on the stack while torch executes, so a failing
    `import torch` produces exactly the traceback it would without vramguard.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        from importlib.machinery import ModuleSpec

        spec = None
        for finder in sys.meta_path:
            fs = getattr(finder, "find_spec", None)
            if fs is None:
                continue
            spec = fs(fullname, path, target)
            if spec is not None:
                break
        if spec is not None and type(spec) is ModuleSpec:
            spec.__class__ = _TorchSpec
        return spec

    def invalidate_caches(self):
        pass


def _make_torch_spec():
    from importlib.machinery import ModuleSpec

    class _TorchSpec(ModuleSpec):
        def __setattr__(self, name, value):
            object.__setattr__(self, name, value)
            if name == "_initializing" and value is False:
                object.__setattr__(self, "__class__", ModuleSpec)
                torch = sys.modules.get("torch")
                if torch is not None:
                    on_torch_imported(torch)

    return _TorchSpec


_TorchSpec = _make_torch_spec()
