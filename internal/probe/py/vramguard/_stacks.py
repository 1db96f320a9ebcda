"""Stack dumps on demand: with a run directory, every thread's Python stack
goes to RUN_DIR/stacks-[<attempt>-]<pid>.txt when the process gets
STACK_SIGNAL (faulthandler writes it, so it works in a process stuck in C).
The supervisor sends it to the pids of its "hello" lines (probe.StackSignal
on the Go side)."""

import os

# The C module: signal.py imports enum, which costs every probed process
# start-up time.
try:
    import _signal as signal
except ImportError:  # pragma: no cover
    import signal

STACK_SIGNAL = signal.SIGUSR2


def register(cfg, pid):
    """Send the stacks to this process's file on STACK_SIGNAL, unless the
    job (or a notebook) already uses the signal: (open file, its path), or
    (None, "")."""
    import faulthandler

    try:
        if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
            return None, ""  # the job (or a notebook) already uses it
        path = cfg.file_prefix("stacks", pid) + ".txt"
        f = open(path, "a")
        faulthandler.register(STACK_SIGNAL, file=f, all_threads=True, chain=False)
        return f, path
    except (OSError, ValueError, RuntimeError):
        return None, ""


def close(f, path):
    """Stop dumping to f; remove its file when nothing was dumped."""
    try:
        import faulthandler

        faulthandler.unregister(STACK_SIGNAL)
        empty = os.fstat(f.fileno()).st_size == 0
        f.close()
        if empty:
            os.unlink(path)
    except (OSError, ValueError):
        pass
