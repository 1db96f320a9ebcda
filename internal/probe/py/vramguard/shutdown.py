"""A kernel's shutdown_request, told to its supervisor.

Jupyter's clients ask a kernel to shut down, or to restart (shut down, then
a new process on the same connection file), over the kernel's control
channel, which vramguard's supervisor does not see. The client then waits
half of its shutdown_wait_time (2.5 s by default) for the process to end,
sends it SIGTERM, and SIGKILL after the other half. A `kernel_shutdown`
message sent as the kernel starts on the request lets the supervisor take
those signals for part of it: the attempt ended "restarted" (or "success"
for a shutdown), not "interrupted".

The kernel's do_shutdown is wrapped on the instance (ipykernel calls it for
a shutdown_request on either channel); close() puts it back.
"""

from . import _probe


class Watch:
    def __init__(self, shell):
        self.kernel = getattr(shell, "kernel", None)
        self.orig = None
        self.own = False  # the kernel had a do_shutdown of its own instance
        k = self.kernel
        orig = getattr(k, "do_shutdown", None)
        if k is None or not callable(orig):
            return
        try:
            self.own = "do_shutdown" in vars(k)
        except TypeError:
            return

        def do_shutdown(restart, *args, **kwargs):
            _probe.event("kernel_shutdown", restart=bool(restart))
            return orig(restart, *args, **kwargs)

        try:
            k.do_shutdown = do_shutdown
        except Exception:
            return
        self.orig = orig

    def close(self):
        k, orig, self.orig = self.kernel, self.orig, None
        if orig is None:
            return
        try:
            if self.own:
                k.do_shutdown = orig
            else:
                del k.do_shutdown
        except Exception:
            pass
