"""A small training job that dies the way training jobs die.

It trains a tiny model for a few epochs, writing a checkpoint after each one,
then restarts from its newest checkpoint, which a crash during the previous
save left truncated (the classic "PytorchStreamReader failed reading zip
archive: failed finding central directory"). It needs no GPU and no root:
with PyTorch it uses torch; without it, plain pickle, which fails the same way.

    vramguard run --name demo -- python3 examples/demo_train.py --dir "${TMPDIR:-/tmp}/vramguard-demo"
    vramguard run --name demo2 --resume-from "${TMPDIR:-/tmp}/vramguard-demo" -- \
        python3 examples/demo_train.py --dir "${TMPDIR:-/tmp}/vramguard-demo" --resume {resume}

Without --dir it writes under Python's temporary directory ($TMPDIR, else /tmp).
"""
import argparse
import os
import pickle
import random
import sys
import tempfile
import time

try:
    import torch
except Exception:  # the demo still runs where PyTorch is not installed
    torch = None

p = argparse.ArgumentParser()
p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "vramguard-demo"))
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--resume", default=None, help="checkpoint to resume from (vramguard fills in {resume})")
args = p.parse_args()
os.makedirs(args.dir, exist_ok=True)


def save(obj, path):
    if torch is not None:
        torch.save(obj, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(obj, f)


def load(path):
    if torch is not None:
        return torch.load(path)
    with open(path, "rb") as f:
        return pickle.load(f)


def train(start_epoch, weights):
    for epoch in range(start_epoch, start_epoch + args.epochs):
        for step in range(5):
            loss = 1.0 / (1 + epoch * 5 + step) + random.random() * 0.01
            weights = [w - 0.01 * loss for w in weights]
            print(f"epoch {epoch} step {step} loss {loss:.4f}", flush=True)
            time.sleep(0.05)
        path = os.path.join(args.dir, f"epoch-{epoch:03d}.ckpt")
        state = {"epoch": epoch, "loss": loss,
                 "weights": torch.tensor(weights) if torch is not None else weights}
        save(state, path)
        print(f"saved {path}", flush=True)
    return weights


if args.resume:
    state = load(args.resume)
    print(f"resumed from {args.resume} at epoch {state['epoch']}", flush=True)
    train(state["epoch"] + 1, list(map(float, state["weights"])))
    print("training finished", flush=True)
    sys.exit(0)

weights = train(0, [random.random() for _ in range(256)])
# The job is preempted while writing its next checkpoint: half the file
# reaches the disk, and that truncated file is now the newest.
torn = os.path.join(args.dir, f"epoch-{args.epochs:03d}.ckpt")
save({"epoch": args.epochs, "weights": weights}, torn)
with open(torn, "rb") as f:
    data = f.read()
with open(torn, "wb") as f:
    f.write(data[: len(data) // 2])
print(f"(simulated preemption: {torn} was cut short mid-save)", flush=True)
newest = max(os.listdir(args.dir))
print(f"resuming from the newest checkpoint, {newest}", flush=True)
load(os.path.join(args.dir, newest))
