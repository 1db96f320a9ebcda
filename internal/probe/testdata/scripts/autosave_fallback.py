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

import json
import os
import signal
import sys
import time
import warnings

import torch
import vramguard
import vramguard.autosave

engine = sys.modules["vramguard.autosave"]
scenario, d = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
m = torch.nn.Linear(3, 1)
opt = torch.optim.Adam(m.parameters(), lr=0.01)
facts = {"error": "", "warnings": []}
step = 0
warnings.simplefilter("always")
caught = warnings.catch_warnings(record=True)
seen = caught.__enter__()


def train(n):
    global step
    for _ in range(n):
        m(torch.randn(2, 3)).sum().backward()
        opt.step()
        opt.zero_grad()
        step += 1


kw = {"quiet": {}, "quiet_saved": {}, "off": {"fallback": None}, "zero": {"fallback": 0},
      "schedulers": {}, "bad_fallback": {"fallback": "soon"}}[scenario]
before = torch.optim.lr_scheduler.StepLR(opt, 2) if scenario == "schedulers" else None
try:
    a = vramguard.autosave(model=m, opt=opt, dir=d, every="1h", keep=10, **kw)
except engine.AutosaveError as e:
    facts["error"] = str(e)
    print(json.dumps(facts))
    sys.exit(0)

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

saves = []
for p in engine.files(d):
    sd = torch.load(p)
    st = sd["objects"]["opt"]["state"]
    saves.append([os.path.basename(p).rsplit("-", 1)[1], int(st[0]["step"]) if st else 0])
facts["saves"] = saves
facts["fallbacks"] = getattr(a, "fallback_saves", None)
facts["steps"] = step
facts["warnings"] = [str(w.message).split("\n")[0] for w in seen]
print(json.dumps(facts))
