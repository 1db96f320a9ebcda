"""`python -m vramguard ARGS`: run the vramguard command with ARGS.

`pip install vramguard` puts the command in the scripts directory of the
environment it installs into (a virtual environment's bin/, ~/.local/bin for
--user). `python -m vramguard` finds it there even when that directory is not
on PATH, as in a notebook's `!python -m vramguard runs`, then looks on PATH.
"""

import os
import shutil
import sys
import sysconfig


def _candidates():
    dirs = [sysconfig.get_path("scripts")]
    try:
        dirs.append(sysconfig.get_path("scripts", scheme=os.name + "_user"))
    except KeyError:
        pass
    # PREFIX/lib/pythonX.Y/site-packages/vramguard/__main__.py -> PREFIX/bin,
    # for a package installed with --prefix.
    here = os.path.dirname(os.path.abspath(__file__))
    dirs.append(os.path.normpath(os.path.join(here, os.pardir, os.pardir, os.pardir, os.pardir, "bin")))
    seen = []
    for d in dirs:
        if d and d not in seen:
            seen.append(d)
    return seen


def main():
    dirs = _candidates()
    for d in dirs:
        exe = os.path.join(d, "vramguard")
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            break
    else:
        exe = shutil.which("vramguard")
    if not exe:
        sys.stderr.write(
            "vramguard: the vramguard command is not installed next to this Python (looked in %s) "
            "nor on PATH; install it with `pip install vramguard` (see README.md, Install)\n" % ", ".join(dirs)
        )
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
