"""Where a notebook keeps what its user can name, for `%vramguard who` and
`%vramguard free`: the notebook's own variables (less IPython's names), the
output cache (Out[n], _n, _, __, ___ and the last cell's result), every
place IPython keeps the last exception, and the cell a file name was
compiled from."""

import sys

# IPython's own names in a notebook's namespace: the walk names these roots
# by where the shell keeps them instead.
_SHELL_NAMES = frozenset(("In", "Out", "_oh", "_ih", "_dh", "_", "__", "___", "_i", "_ii", "_iii",
                          "get_ipython", "exit", "quit", "__builtins__", "__builtin__", "__name__",
                          "__doc__", "__package__", "__loader__", "__spec__"))


def shell_name(name, hidden):
    """Whether a name of the notebook's namespace is IPython's own."""
    if name in _SHELL_NAMES or name in hidden:
        return True
    if name.startswith("_") and name[1:].isdigit():
        return True  # _3: Out[3]
    if name.startswith("_i") and name[2:].isdigit():
        return True  # _i3: In[3]
    return False


def cell_of(shell, filename):
    """In[N] for a file name IPython compiled a cell under, else None."""
    try:
        n = shell.compile._filename_map.get(filename)
    except Exception:
        n = None
    return "In[%d]" % n if isinstance(n, int) else None


def _package_dirs(*names):
    import os

    out = []
    for n in names:
        m = sys.modules.get(n)
        f = getattr(m, "__file__", None)
        if f:
            out.append(os.path.dirname(os.path.abspath(f)) + os.sep)
    return tuple(out) or ("\0",)


# Frames of the shell's own code (run_code's, the kernel's) hold the shell,
# not the user's objects: a traceback's walk skips them.
SHELL_DIRS = _package_dirs("IPython", "ipykernel", "vramguard")


def exception_roots(shell):
    """(object, path) of every place IPython keeps the last exception."""
    out = []
    for name in ("last_traceback", "last_value", "last_exc"):
        v = getattr(sys, name, None)
        if v is not None:
            out.append((v, "sys." + name))
    for attr, label in (("InteractiveTB", "shell.InteractiveTB.tb"), ("SyntaxTB", "shell.SyntaxTB.tb")):
        tb = getattr(getattr(shell, attr, None), "tb", None)
        if tb is not None:
            out.append((tb, label))
    r = getattr(shell, "last_execution_result", None)
    for attr in ("error_in_exec", "error_before_exec"):
        v = getattr(r, attr, None)
        if v is not None:
            out.append((v, "shell.last_execution_result." + attr))
    return out


OUTPUT_CACHE = "output cache"


def output_roots(shell):
    """(object, path, group) of the output cache: Out[n], then the other
    places the shell keeps outputs (grouped as "output cache")."""
    out = []
    oh = shell.user_ns.get("_oh")
    if type(oh) is dict:
        out += [(v, "Out[%d]" % n, "Out[%d]" % n) for n, v in sorted(oh.items()) if isinstance(n, int)]
    dh = getattr(shell, "displayhook", None)
    for name in ("_", "__", "___"):
        v = shell.user_ns.get(name)
        if v is not None and v is getattr(dh, name, v):
            out.append((v, name, OUTPUT_CACHE))
    hidden = getattr(shell, "user_ns_hidden", None)
    if type(hidden) is dict:
        out += [(v, "shell.user_ns_hidden[%r]" % k, OUTPUT_CACHE) for k, v in list(hidden.items()) if output_name(k)]
    r = getattr(shell, "last_execution_result", None)
    if getattr(r, "result", None) is not None:
        out.append((r.result, "shell.last_execution_result.result", OUTPUT_CACHE))
    return out


def output_name(k):
    """_, __, ___ and _N: the names the display hook sets."""
    return type(k) is str and (k in ("_", "__", "___") or (k[:1] == "_" and k[1:].isdigit()))
