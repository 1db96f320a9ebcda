#!/usr/bin/python3
"""Write internal/ckpt/testdata/series: one training run's output directory.

Run with Debian's PyTorch (python3-torch):

    /usr/bin/python3 scripts/gen-ckpt-series.py [OUTDIR]

OUTDIR defaults to internal/ckpt/testdata/series. It holds run/, the kind of
directory `vramguard ckpt latest`, `ckpt prune` and `run --resume-from` are
pointed at, with one series of real checkpoints among files that are not
checkpoints:

    run/ckpt-100.pt, ckpt-200.pt, ckpt-300.pt
        torch.save({"model": state_dict, "optimizer": Adam state_dict,
        "step": N, "epoch": E, "loss": L}) after N real training steps.
    run/optimizer.pt
        torch.save(optimizer.state_dict()) alone, 400 steps in. Its
        per-parameter "step" is an int, as torch < 1.12 and transformers'
        AdamW store it (torch 1.13 stores a 0-d tensor): a nested step that
        must not be read as the checkpoint's step.
    run/config.pt
        torch.save of a dict of hyper-parameters (epochs, a nested
        schedule.step, ...): no tensors.
    run/training_args.bin
        torch.save of a TrainingArguments dataclass, declared under
        transformers.training_args the way HF's Trainer writes it (the
        transformers package is not installed here).
    run/vocab.pkl
        pickle.dump of a dict str -> int.
    run/tokenizer.json
        JSON.
    run/notes/.metadata, run/notes/README.txt
        text: a folder with a file named .metadata that is not a
        torch.distributed.checkpoint.

expected.json records, for every file, what torch.load itself finds in it:
whether it holds floating-point tensors outside an optimizer state_dict (the
model weights), and its top-level step and epoch. The Go tests compare their
classification against it.
"""
import dataclasses
import json
import os
import pickle
import sys
import types

import torch
import torch.nn as nn

torch.manual_seed(0)

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "internal", "ckpt", "testdata", "series")
OUT = os.path.abspath(OUT)
RUN = os.path.join(OUT, "run")


# HF's TrainingArguments, declared under its real module name so the pickle
# references transformers.training_args.TrainingArguments as HF's does.
mod = types.ModuleType("transformers.training_args")
sys.modules.setdefault("transformers", types.ModuleType("transformers"))
sys.modules["transformers.training_args"] = mod


@dataclasses.dataclass
class TrainingArguments:
    output_dir: str = "run"
    num_train_epochs: float = 3.0
    max_steps: int = -1
    learning_rate: float = 5e-5
    per_device_train_batch_size: int = 8
    logging_steps: int = 10
    save_steps: int = 100
    save_total_limit: int = 2
    seed: int = 42


TrainingArguments.__module__ = "transformers.training_args"
TrainingArguments.__qualname__ = "TrainingArguments"
mod.TrainingArguments = TrainingArguments


def net():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def main():
    os.makedirs(os.path.join(RUN, "notes"), exist_ok=True)
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    step = 0

    def train(n):
        nonlocal step
        loss = None
        for _ in range(n):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            step += 1
        return float(loss)

    for n, epoch in ((100, 1), (200, 2), (300, 3)):
        loss = train(n - step)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "epoch": epoch, "loss": loss},
                   os.path.join(RUN, "ckpt-%d.pt" % n))

    train(100)
    sd = opt.state_dict()
    for s in sd["state"].values():
        s["step"] = int(s["step"])  # as torch < 1.12 and transformers' AdamW
    torch.save(sd, os.path.join(RUN, "optimizer.pt"))

    torch.save({"lr": 1e-2, "hidden": 16, "epochs": 90, "batch_size": 32, "max_steps": 5000,
                "schedule": {"name": "step", "step": 5000, "gamma": 0.1}},
               os.path.join(RUN, "config.pt"))
    torch.save(TrainingArguments(), os.path.join(RUN, "training_args.bin"))

    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "the", "a", "checkpoint", "step", "epoch"])}
    with open(os.path.join(RUN, "vocab.pkl"), "wb") as f:
        pickle.dump(vocab, f)
    with open(os.path.join(RUN, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}, f, indent=1)
        f.write("\n")
    with open(os.path.join(RUN, "notes", ".metadata"), "w") as f:
        f.write("created-by: notebook\nexperiment: baseline\nstep: 300\n")
    with open(os.path.join(RUN, "notes", "README.txt"), "w") as f:
        f.write("Baseline run. Resume from the newest ckpt-N.pt.\n")

    expected = {}
    for name in sorted(os.listdir(RUN)):
        p = os.path.join(RUN, name)
        if os.path.isdir(p):
            continue
        if name.endswith(".json"):
            expected[name] = {"torch_load": False}
            continue
        if name.endswith(".pkl"):
            with open(p, "rb") as f:
                obj = pickle.load(f)
        else:
            obj = torch.load(p)
        top = obj if isinstance(obj, dict) else {}
        expected[name] = {
            "torch_load": True,
            "model_weights": has_model_weights(obj),
            "step": top.get("step") if isinstance(top.get("step"), int) else None,
            "epoch": top.get("epoch") if isinstance(top.get("epoch"), int) else None,
        }
    expected["latest"] = "ckpt-300.pt"
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


def has_model_weights(obj, under_optimizer=False):
    """Floating-point tensors outside an optimizer state_dict."""
    if isinstance(obj, torch.Tensor):
        return obj.is_floating_point() and not under_optimizer
    if isinstance(obj, dict):
        opt = under_optimizer or ("state" in obj and "param_groups" in obj)
        return any(has_model_weights(v, opt) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(has_model_weights(v, under_optimizer) for v in obj)
    if dataclasses.is_dataclass(obj):
        return any(has_model_weights(getattr(obj, f.name), under_optimizer) for f in dataclasses.fields(obj))
    return False


if __name__ == "__main__":
    main()
