"""vramguard.autosave()'s fallback, one scenario per run (argv[1]); prints
one JSON line: the saves (the file's step number, Adam's step in it,
whether the fallback made it), the warnings Python raised, whether each
optimizer's step is torch's own again after off().

  quiet         3 steps, 6 s without one (past STALL), then SIGUSR1: the
                fallback saves at once (step 3), nothing waits for a step
  quiet_saved   the same after a save at step 3: nothing unsaved, no save
  off           fallback=None: SIGUSR1 while stepping, then no step for 3 s:
                no save
  zero          fallback=0: SIGUSR1 while stepping, then no step: saved at
                once from the thread
  schedulers    LR schedulers made before and after autosave(): they count
                steps through the guarded step as they do without it, with
                no warning; off() turns the guard off
  bad_fallback  fallback="soon": a one-line error
"""

import os
import signal
import sys
import time
import warnings

import autosave_rig
import torch

scenario, d = sys.argv[1], sys.argv[2]
rig = autosave_rig.Rig()
train, opt = rig.train, rig.opt
facts = {"error": "", "warnings": []}
warnings.simplefilter("always")
caught = warnings.catch_warnings(record=True)
seen = caught.__enter__()

kw = {"quiet": {}, "quiet_saved": {}, "off": {"fallback": None}, "zero": {"fallback": 0},
      "schedulers": {}, "bad_fallback": {"fallback": "soon"}}[scenario]
before = torch.optim.lr_scheduler.StepLR(opt, 2) if scenario == "schedulers" else None
a = rig.autosave(facts, d, **kw)

if scenario in ("quiet", "quiet_saved"):
    train(3)
    if scenario == "quiet_saved":
        a.save()
    time.sleep(6)
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(2)
elif scenario in ("off", "zero"):
    train(3)
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(3)
elif scenario == "schedulers":
    after = torch.optim.lr_scheduler.StepLR(opt, 2)
    for _ in range(4):
        train(1)
        before.step()
        after.step()
    # a twin without autosave, its schedulers made alike, steps alike
    m2 = torch.nn.Linear(3, 1)
    opt2 = torch.optim.Adam(m2.parameters(), lr=0.01)
    b2 = torch.optim.lr_scheduler.StepLR(opt2, 2)
    a2 = torch.optim.lr_scheduler.StepLR(opt2, 2)
    for _ in range(4):
        m2(torch.randn(2, 3)).sum().backward()
        opt2.step()
        opt2.zero_grad()
        b2.step()
        a2.step()
    facts["lr_as_without"] = [before.get_last_lr() == b2.get_last_lr(), after.get_last_lr() == a2.get_last_lr(),
                              opt._step_count == opt2._step_count]
    a.off()
    facts["guarded_after_off"] = a.guard.on
    train(1)

facts["fallbacks"] = getattr(a, "fallback_saves", None)
facts["warnings"] = [str(w.message).split("\n")[0] for w in seen]
rig.report(facts, d)
