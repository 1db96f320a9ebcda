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

import os
import signal
import sys

import autosave_rig

scenario, d = sys.argv[1], sys.argv[2]
rig = autosave_rig.Rig()
train = rig.train
facts = {"calls": [], "error": ""}


def handler(signum, frame):
    facts["calls"].append([signal.Signals(signum).name, rig.step])


if scenario == "own_handler":
    signal.signal(signal.SIGUSR1, handler)
    signal.signal(signal.SIGTERM, handler)
elif scenario == "ignored":
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

rig.autosave(facts, d, **({"save_on": "SIGKILL"} if scenario == "bad_save_on" else {}))

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

rig.report(facts, d)
