# vramguard probe bootstrap.
#
# vramguard puts the directory holding this file first on PYTHONPATH. Python
# imports it at start-up as `sitecustomize`, which would hide any
# sitecustomize the environment already has, so that one is found further
# along sys.path and run first, exactly as Python would have run it (its
# errors propagate to site.py, which reports them the way it always does).
# Then the probe starts; it never raises and never prints. Last, this
# directory leaves sys.path again (the probe is imported by then, and child
# processes find it through PYTHONPATH), so the job sees the sys.path it
# would have without vramguard and a later `import sitecustomize` finds the
# original.


import os as _vramguard_os

_VRAMGUARD_DIR = _vramguard_os.path.dirname(_vramguard_os.path.abspath(__file__))


def _vramguard_here(p):
    try:
        return _vramguard_os.path.samefile(p or ".", _VRAMGUARD_DIR)
    except (OSError, TypeError, ValueError):
        return False


def _vramguard_chain():
    import sys
    from importlib._bootstrap import module_from_spec  # importlib.util costs more to import
    from importlib.machinery import PathFinder

    rest = [p for p in sys.path if not _vramguard_here(p)]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    # Importing this module returns whatever sys.modules holds when it
    # finishes, so `import sitecustomize` afterwards sees the original.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _vramguard_start():
    import sys

    try:
        from vramguard import _probe

        _probe.start_from_env()
    except BaseException:
        pass
    try:
        sys.path[:] = [p for p in sys.path if not _vramguard_here(p)]
    except BaseException:
        pass


try:
    _vramguard_chain()
finally:
    _vramguard_start()
