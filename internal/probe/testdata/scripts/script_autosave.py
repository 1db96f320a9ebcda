"""vramguard.autosave() in a script, one scenario per run (argv[1]), the
signals sent by the script to itself; prints one JSON line of what it saw:
the saves (file name, Adam's step in the file), the handler calls (signal,
the step the job had made when it ran) and whether the process lived on.

  own_handler  the job's own SIGUSR1 and SIGTERM handlers
  ignored      SIGUSR1 ignored by the job
  term         SIGTERM with no handler of the job's (it ends of it)
  thread       the same, training in a thread other than the main one
  idle         the warning before any optimizer step
  save_on      VRAMGUARD_SAVE_ON=SIGHUP
  bad_save_on  save_on="SIGKILL"
"""

import json
import os
import signal
import sys

import torch
import vramguard
import vramguard.autosave

engine = sys.modules["vramguard.autosave"]

scenario, d = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
m = torch.nn.Linear(3, 1)
opt = torch.optim.Adam(m.parameters(), lr=0.01)
facts = {"calls": [], "error": ""}
step = 0


def train(n):
    global step
    for _ in range(n):
        m(torch.randn(2, 3)).sum().backward()
        opt.step()
        opt.zero_grad()
        step += 1


def handler(signum, frame):
    facts["calls"].append([signal.Signals(signum).name, step])


if scenario == "own_handler":
    signal.signal(signal.SIGUSR1, handler)
    signal.signal(signal.SIGTERM, handler)
elif scenario == "ignored":
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

try:
    vramguard.autosave(model=m, opt=opt, dir=d, every="1h", keep=10,
                       **({"save_on": "SIGKILL"} if scenario == "bad_save_on" else {}))
except engine.AutosaveError as e:
    facts["error"] = str(e)
    print(json.dumps(facts))
    sys.exit(0)

if scenario == "idle":
    os.kill(os.getpid(), signal.SIGUSR1)
    train(3)
elif scenario == "save_on":
    train(3)
    os.kill(os.getpid(), signal.SIGHUP)
    train(2)
elif scenario == "term":
    train(3)
    os.kill(os.getpid(), signal.SIGTERM)
    train(2)
elif scenario == "thread":
    import threading
    import time

    def loop():
        train(3)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # the main thread's handler runs
        train(2)
        time.sleep(5)

    th = threading.Thread(target=loop)
    th.start()
    while th.is_alive():
        th.join(0.05)
else:
    train(3)
    os.kill(os.getpid(), signal.SIGUSR1)
    train(2)
    if scenario == "own_handler":
        os.kill(os.getpid(), signal.SIGTERM)
        train(2)

saves = []
for p in engine.files(d):
    sd = torch.load(p)
    st = sd["objects"]["opt"]["state"]
    saves.append([os.path.basename(p).rsplit("-", 1)[1], int(st[0]["step"]) if st else 0])
facts["saves"] = saves
facts["steps"] = step
print(json.dumps(facts))
