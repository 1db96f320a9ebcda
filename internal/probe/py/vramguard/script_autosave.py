"""vramguard.autosave(): a training script's model, optimizer and scheduler
kept on disk by the notebook's autosave engine (vramguard.autosave), and
saved once more when the scheduler warns that the job ends.

    import vramguard
    vramguard.autosave(model=model, opt=opt, sched=sched, dir="ckpt/", every="30m")

Each keyword names an object with state_dict(); the file holds
{"objects": {name: state_dict}} (see vramguard.autosave for the format:
atomic, fsynced, the newest `keep` kept, a `ckpt` event to the supervisor).
Saves run right after an optimizer's step() returns, once `every` has
passed since the last: the point where the weights and the optimizer's
state agree. The files are named after the script and numbered by the
process's optimizer steps.

On the warning signal (VRAMGUARD_SAVE_ON, set by `vramguard run --save-on`;
SIGUSR1 by default) and on SIGTERM while the job has no SIGTERM handler of
its own, the handler notes the time and the next optimizer step saves at
once; the ckpt event carries the signal, its time and the save's. Then the
handler that was there before runs: a Python handler is called, SIGTERM's
default is raised again (the job ends as it would have), an ignored signal
stays ignored, and the warning signal's default (SIGUSR1's ends the job)
is not taken: the warning is what the save was for, and the job trains on
to its end.

When no step comes (the job blocked in data loading, a collective or a
handler of its own), the fallback saves from a thread `fallback` seconds
after the warning (autosave_fallback: 2 s by default), between two steps:
a step in progress is waited for, the next one waits for the save. A job
that is not stepping when the warning comes (no optimizer step in the last
STALL seconds, or ten times its mean step time if longer) is saved by the
fallback at once when it stepped since its last save; then, or at once when
nothing is unsaved, its previous handler runs.
"""

import os
import signal
import sys
import threading

from . import _probe
from ._units import parse_duration
from .autosave import DEFAULT_KEEP, Autosave, AutosaveError
from .autosave_fallback import DEFAULT_FALLBACK, Fallback, StepGuard

ENV_SAVE_ON = "VRAMGUARD_SAVE_ON"
DEFAULT_SAVE_ON = "SIGUSR1"
STALL = 5.0

_current = None  # the ScriptAutosave of this process


def signal_of(name):
    """A signal number from SIGUSR1, USR1, 10; ValueError for others."""
    t = str(name).strip().upper()
    if t.isdigit():
        n = int(t)
        try:
            return signal.Signals(n)
        except ValueError:
            raise ValueError("%s is not a signal number" % name) from None
    if not t.startswith("SIG"):
        t = "SIG" + t
    s = getattr(signal, t, None)
    if not isinstance(s, signal.Signals) or s in (signal.SIGKILL, signal.SIGSTOP):
        raise ValueError("%s is not a signal that can be caught" % name)
    return s


class ScriptAutosave(Autosave):
    """The engine with a warning: after a save-on signal, the next optimizer
    step saves regardless of `every`, then the signal's previous handler
    runs."""

    def __init__(self, objects, script, **kw):
        super().__init__(objects, counter=lambda: _probe._optimizer_steps or self.steps, notebook=script, **kw)
        self.script = script or "-"
        self.pending = []  # (signal, wall time, previous handler) not yet served
        self.previous = {}  # signal -> the handler before ours
        self.passing = set()  # signals to pass on when they come again
        self.step_times = []  # clock() of the recent steps
        self.steps = 0  # steps seen by the hooks (the probe counts them under `vramguard run`)
        # reentrant: the signal handler takes it in the main thread, which
        # may hold it already when the signal comes
        self.lock = threading.RLock()
        self.fallback = DEFAULT_FALLBACK  # seconds after a warning; None: off
        self.guard = StepGuard()
        self.timer = Fallback(self._fallback)
        self.saved_steps = None  # counter() at the last save
        self.fallback_saves = 0  # saves the fallback made

    def watch(self, signals):
        for s in signals:
            prev = signal.getsignal(s)
            if s in self.previous or (s == signal.SIGTERM and prev not in (signal.SIG_DFL, None)):
                continue  # the job handles SIGTERM itself: its own handler decides
            self.previous[s] = prev
            signal.signal(s, self._on_signal)

    def off(self):
        """Stop saving, and give the signals back to their handlers."""
        self.timer.cancel()
        self.unwatch()
        self.guard.unwrap()
        super().off()

    def hook_optimizers(self):
        super().hook_optimizers()
        optim = sys.modules.get("torch.optim")
        opt_t = getattr(optim, "Optimizer", None)
        if opt_t is None or self.fallback is None:
            return
        ns = self._ns()
        for n in self.names:
            if isinstance(ns.get(n), opt_t):
                self.guard.wrap(ns[n])

    def unwatch(self):
        for s, prev in self.previous.items():
            if signal.getsignal(s) == self._on_signal:
                signal.signal(s, prev if prev is not None else signal.SIG_DFL)
        self.previous = {}

    def _on_signal(self, signum, frame):
        s = signal.Signals(signum)
        entry = (s, self.wall(), self.previous.get(s, signal.SIG_DFL))
        if s in self.passing:  # sent again by _chain from a training thread
            self.passing.discard(s)
            self._chain(entry, frame)
            return
        if not self._stepping():
            if self.fallback is None or self.counter() == self.saved_steps:
                self._chain(entry, frame)  # nothing unsaved, or no fallback
                return
            with self.lock:
                self.pending.append(entry)
            self.timer.arm(0.0)
            return
        with self.lock:
            self.pending.append(entry)
        if self.fallback is not None:
            self.timer.arm(self.fallback)

    def _stepping(self):
        t = self.step_times
        if not t:
            return False
        quiet = self.clock() - t[-1]
        mean = (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else 0.0
        return quiet <= max(STALL, 10 * mean)

    def save(self, **extra):
        path = super().save(script=self.script, **extra)
        if path:
            self.saved_steps = self.counter()
        return path

    def _after_step(self):
        self.steps += 1
        self.step_times.append(self.clock())
        del self.step_times[:-20]
        with self.lock:
            served, self.pending = self.pending, []
        if not served:
            super()._after_step()
            return
        self.timer.cancel()
        s, warned, _ = served[0]
        self.save(signal=s.name, warned_at=round(warned, 6))
        for e in served:
            self._chain(e, None)

    def _fallback(self, delay):
        """The timer's save: no step served the warning in time. Holding
        the step guard, it waits for a step in progress (whose own hook may
        serve the warning first) and keeps the next one out until saved."""
        with self.guard.lock:
            with self.lock:
                served, self.pending = self.pending, []
            if not served:
                return
            s, warned, _ = served[0]
            if self.save(signal=s.name, warned_at=round(warned, 6), fallback=True, fallback_s=round(delay, 3)):
                self.fallback_saves += 1
        for e in served:
            self._chain(e, None)

    def _chain(self, entry, frame):
        s, _, prev = entry
        if threading.current_thread() is not threading.main_thread():
            # handlers run, and are set, in the main thread only: the
            # signal goes there again, and the handler there chains
            self.passing.add(s)
            os.kill(os.getpid(), s)
            return
        if callable(prev):
            prev(int(s), frame)
        elif prev in (signal.SIG_DFL, None) and s == signal.SIGTERM:
            signal.signal(s, signal.SIG_DFL)
            os.kill(os.getpid(), s)


def autosave(dir="vramguard-autosave", every="30m", keep=DEFAULT_KEEP, save_on=None, fallback=DEFAULT_FALLBACK, **objects):
    """Save objects' state_dict()s (model=..., opt=..., sched=...) to dir
    every `every` (10m, 90s, 1h, or seconds), at optimizer steps, keeping the
    newest `keep`; save at the next step after the save-on signal (save_on,
    else $VRAMGUARD_SAVE_ON, else SIGUSR1) and SIGTERM, or from a thread
    `fallback` (2s, 1.5s, or seconds; 0: at once; None: never) after it
    when no step came by then. Saves once now. Returns the engine
    (status(), save(), off()). Call it from the main thread; a second call
    replaces the first."""
    global _current
    if not objects:
        raise AutosaveError("name the objects to save: vramguard.autosave(model=model, opt=opt)")
    for n, obj in objects.items():
        if not callable(getattr(obj, "state_dict", None)):
            raise AutosaveError("%s (%s) has no state_dict()" % (n, type(obj).__name__))
    period = parse_duration(every) if isinstance(every, str) else float(every)
    if not period > 0:
        raise AutosaveError("every must be more than zero")
    if fallback is None or fallback is False:
        fb = None
    else:
        try:
            fb = parse_duration(fallback) if isinstance(fallback, str) else float(fallback)
        except (TypeError, ValueError):
            raise AutosaveError("fallback must be a duration (2s, 1.5s, seconds) or None, not %r" % (fallback,)) from None
        if not fb >= 0:
            raise AutosaveError("fallback must be zero or more")
    names = save_on if save_on is not None else (os.environ.get(ENV_SAVE_ON) or DEFAULT_SAVE_ON)
    signals = []
    for n in str(names).replace(",", " ").split():
        try:
            signals.append(signal_of(n))
        except ValueError as e:
            raise AutosaveError(str(e)) from None
    if signal.SIGTERM not in signals:
        signals.append(signal.SIGTERM)
    _probe.start()
    if "torch.optim" not in sys.modules:
        import torch.optim  # noqa: F401  (the objects are torch's; the hooks need the module)
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c", "-") else ""
    if _current is not None:
        _current.off()
    a = ScriptAutosave(dict(objects), script)
    a.fallback = fb
    a.configure(list(objects), period, dir, keep)
    if a.warning:
        sys.stderr.write("vramguard: autosave: warning: %s\n" % a.warning)
    a.watch(signals)
    _current = a
    return a

