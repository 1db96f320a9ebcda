"""What the scripts that drive the notebook side in a bare IPython shell
share.

    shell()            the InteractiveShell, without colours
    captured(ip, src)  runs src in ip as a kernel runs a cell, with its
                       stdout and stderr captured; returns (the run's
                       result, stdout, stderr)
"""

import io
import sys

from IPython.core.interactiveshell import InteractiveShell


def shell():
    return InteractiveShell.instance(colors="NoColor")


def captured(ip, src):
    out, err = io.StringIO(), io.StringIO()
    so, se = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        r = ip.run_cell(src, store_history=True)
    finally:
        sys.stdout, sys.stderr = so, se
    return r, out.getvalue(), err.getvalue()
