"""Autosave and restore against files that are not the notebook's own, in a
bare IPython shell with the notebook side loaded. Prints one JSON line for
the Go tests (TestAutosaveForeignFiles, TestAutosaveTwoNotebooks).

    autosave_files.py foreign WORK UID   another user (UID, through setpriv)
                                         plants a directory, symlinks and
                                         files in a shared scratch directory
    autosave_files.py save SEED          in the current directory (a
    autosave_files.py restore            notebook's, JPY_SESSION_NAME set):
                                         autosave a model with --keep 1, or
                                         restore the default --dir
    autosave_files.py killsave           autosave, then die by SIGKILL in
                                         the middle of the next save
"""

import json
import os
import shutil
import subprocess
import sys
import time

import shell_rig
import torch

ip = shell_rig.shell()
role = sys.argv[1]


def cell(src):
    r, out, err = shell_rig.captured(ip, src)
    return {"src": src, "stdout": out, "stderr": err, "ok": bool(r.success)}


def weights():
    return ip.user_ns["model"].weight.flatten().tolist()


def model(seed):
    torch.manual_seed(seed)
    ip.user_ns["model"] = torch.nn.Linear(4, 2)


ip.run_cell("%load_ext vramguard")
facts = {}

if role == "foreign":
    work, uid = sys.argv[2], int(sys.argv[3])

    def attacker(script):
        subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", "sh", "-c", script],
                       check=True, env={"PATH": "/usr/bin:/bin"})

    os.chmod(work, 0o755)
    shared = os.path.join(work, "scratch")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)  # as /tmp: everyone creates files, none removes another's
    model(1)
    from vramguard import autosave

    tag = autosave.notebook_tag(autosave.notebook_path()) if hasattr(autosave, "notebook_tag") else ""

    # 1. The directory --dir names was made by another user.
    attacker("mkdir -m 777 %s/nb-saves" % shared)
    facts["their_dir"] = cell("%%vramguard autosave model --dir %s/nb-saves" % shared)
    cell("%vramguard autosave off")
    facts["their_dir_files"] = sorted(os.listdir(os.path.join(shared, "nb-saves")))

    # 2. The notebook's own directory, but writable by all: another user
    # plants symlinks at every name the next saves can take, pointing at a
    # file of the notebook's user.
    precious = os.path.join(work, "precious.txt")
    with open(precious, "w") as f:
        f.write("precious")
    mine = os.path.join(shared, "mine")
    os.mkdir(mine)
    os.chmod(mine, 0o777)
    now = int(time.time())
    names = []
    for t in range(now - 2, now + 40):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(t))
        for n in range(0, 8):
            names.append("autosave-%s-%d.pt" % (stamp, n))
            if tag:
                names.append("autosave-%s-%s-%d.pt" % (tag, stamp, n))
    attacker("cd %s && for n in %s; do ln -s %s $n; done" % (mine, " ".join(names), precious))
    facts["writable_dir"] = cell("%%vramguard autosave model --dir %s" % mine)
    cell("%vramguard autosave off")
    with open(precious, "rb") as f:
        facts["precious"] = f.read(64).decode("utf-8", "replace")

    # 3. restore DIR in the shared directory: the user's own autosave, and
    # another user's newer one (other weights) beside it.
    own = os.path.join(work, "own")
    cell("%%vramguard autosave model --dir %s" % own)
    cell("%vramguard autosave off")
    facts["saved"] = weights()
    mine_file = os.listdir(own)[0]
    shutil.copy(os.path.join(own, mine_file), os.path.join(shared, mine_file))
    model(2)
    theirs_src = os.path.join(work, "theirs.pt")
    torch.save({"vramguard_autosave": 1, "saved_at": int(time.time()), "objects": {"model": ip.user_ns["model"].state_dict()}},
               theirs_src)
    os.chmod(theirs_src, 0o644)
    theirs = "autosave-%s%s-9.pt" % (tag + "-" if tag else "", time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() + 5)))
    attacker("cp %s %s/%s && touch -d '+10 seconds' %s/%s" % (theirs_src, shared, theirs, shared, theirs))
    model(3)
    facts["restore_dir"] = cell("%%vramguard restore %s" % shared)
    facts["restored"] = weights()
    # 4. Another user's file by its path.
    model(3)
    facts["fresh"] = weights()
    facts["restore_theirs"] = cell("%%vramguard restore %s/%s" % (shared, theirs))
    facts["after_theirs"] = weights()
elif role == "save":
    model(int(sys.argv[2]))
    facts["save"] = cell("%vramguard autosave model --keep 1")
    facts["saved"] = weights()
elif role == "restore":
    model(99)
    facts["restore"] = cell("%vramguard restore vramguard-autosave")
    facts["restored"] = weights()
elif role == "killsave":
    model(5)
    facts["save"] = cell("%vramguard autosave model --keep 1 --every 10m")
    facts["saved"] = weights()
    print(json.dumps(facts), flush=True)

    # The next save holds 64 MiB more; a thread kills the process once the
    # file being written has bytes in it.
    import threading

    d = os.path.join(os.getcwd(), "vramguard-autosave")

    def kill_mid_write():
        while True:
            for n in os.listdir(d):
                if n.startswith(".vramguard-stage-") and os.stat(os.path.join(d, n)).st_size > 0:
                    os.kill(os.getpid(), 9)
            time.sleep(0.0005)

    ip.user_ns["big"] = torch.nn.Linear(4096, 4096)
    model(6)
    threading.Thread(target=kill_mid_write, daemon=True).start()
    cell("%vramguard autosave model big --keep 1 --every 10m")
    time.sleep(5)

print(json.dumps(facts), flush=True)
