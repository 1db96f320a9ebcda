"""The warning's save when no optimizer step comes: vramguard.autosave()'s
fallback.

After the scheduler's warning the script autosave saves right after the
next optimizer step, where the weights and the optimizer's state agree. A
job that does not step again (blocked in data loading, in a collective, in
a handler of its own) would reach the scheduler's SIGKILL unsaved. So the
warning also arms a timer: if no save was made FALLBACK seconds after it,
a thread saves. StepGuard keeps that save between steps: each named
optimizer's step() holds its lock, so the save waits for a step in
progress and the next step waits for the save.

DEFAULT_FALLBACK (2 s) fires well within the shortest common grace
(`docker stop`'s 10 s; Slurm's KillWait and Kubernetes' default are 30 s)
and leaves the rest for the save; a step in progress when it fires is
waited for, so firing before a long step ends costs nothing.
"""

import threading
import types

DEFAULT_FALLBACK = 2.0


class StepGuard:
    """A lock each guarded optimizer's step() holds while it runs. The
    optimizer's step is wrapped on the instance (a bound method, as
    torch's LR schedulers expect to find and wrap in turn)."""

    def __init__(self):
        self.lock = threading.RLock()
        self.wrapped = []  # (optimizer, the step it had)
        self.on = True

    def wrap(self, opt):
        self.on = True
        if any(o is opt for o, _, _, _ in self.wrapped):
            return
        had = "step" in opt.__dict__  # an instance's own step (an LR scheduler's counter)
        orig = opt.step
        guard = self

        def step(_self, *a, **k):
            if not guard.on:
                return orig(*a, **k)
            with guard.lock:
                return orig(*a, **k)

        # an LR scheduler made before marks the step it counts; keep the
        # mark so that it does not warn of an overridden step
        if getattr(orig, "_with_counter", False):
            step._with_counter = True
        mine = types.MethodType(step, opt)
        opt.step = mine
        self.wrapped.append((opt, orig, had, mine))

    def unwrap(self):
        """Give each optimizer its step back, unless something wrapped ours
        since (then ours passes through)."""
        self.on = False
        for opt, orig, had, mine in self.wrapped:
            if opt.__dict__.get("step") is not mine:
                continue
            if had:
                opt.step = orig
            else:
                del opt.__dict__["step"]
        self.wrapped = []


class Fallback:
    """One timer at a time: arm(delay) calls fire(delay) in a daemon
    thread delay seconds later, unless cancel() came first."""

    def __init__(self, fire):
        self.fire = fire
        self.timer = None
        # reentrant: arm() runs in a signal handler, in the main thread,
        # which may be inside cancel() when the signal comes
        self.lock = threading.RLock()

    def arm(self, delay):
        with self.lock:
            if self.timer is not None:
                return
            t = threading.Timer(max(0.0, delay), self._run, (max(0.0, delay),))
            t.daemon = True
            t.name = "vramguard-autosave-fallback"
            self.timer = t
        t.start()

    def _run(self, delay):
        with self.lock:
            self.timer = None
        self.fire(delay)

    def cancel(self):
        with self.lock:
            t, self.timer = self.timer, None
        if t is not None:
            t.cancel()
