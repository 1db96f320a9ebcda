# A training loop for run --adapt: it checkpoints every epoch (written aside
# and renamed in) and resumes from --resume. With a batch above --fits it
# raises torch.cuda.OutOfMemoryError with the message torch 1.13's caching
# allocator gives, one epoch into each attempt (activations grow with the
# batch: the request is 64 MiB per sample). --fragmented raises the
# fragmentation form of the message (the cache holds the request's size,
# not in one block) until PYTORCH_CUDA_ALLOC_CONF sets max_split_size_mb or
# expandable segments.
import argparse, os, torch

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, required=True)
p.add_argument("--grad-accum", type=int, default=1)
p.add_argument("--resume", default="")
p.add_argument("--ckpt", required=True)
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--fits", type=int, default=16)
p.add_argument("--fragmented", action="store_true")
a = p.parse_args()

conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
print(f"attempt {os.environ.get('VRAMGUARD_ATTEMPT')}: batch {a.batch_size} accum {a.grad_accum} "
      f"env batch {os.environ.get('VRAMGUARD_BATCH')} PYTORCH_CUDA_ALLOC_CONF={conf}", flush=True)
start = 0
if a.resume:
    start = torch.load(a.resume)["epoch"]
    print(f"resumed from {a.resume} at epoch {start}", flush=True)

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def oom(tried_gib, reserved_gib):
    return torch.cuda.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {tried_gib:.2f} GiB (GPU 0; 79.35 GiB total capacity; "
        f"75.12 GiB already allocated; 1.48 GiB free; {reserved_gib:.2f} GiB reserved in total by PyTorch) "
        "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
        "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")


for epoch in range(start, a.epochs):
    if epoch > start:
        if a.fragmented and "max_split_size_mb" not in conf and "expandable_segments:True" not in conf:
            raise oom(2.0, 77.20)
        if a.batch_size > a.fits:
            raise oom(a.batch_size * 64 / 1024, 75.30)
    for step in range(4 * a.grad_accum):
        loss = model(torch.randn(a.batch_size, 8)).pow(2).mean() / a.grad_accum
        loss.backward()
        if (step + 1) % a.grad_accum == 0:
            opt.step()
            opt.zero_grad()
    path = os.path.join(a.ckpt, f"epoch-{epoch + 1:03d}.pt")
    torch.save({"epoch": epoch + 1, "model": model.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)
    print(f"epoch {epoch + 1} saved", flush=True)
print("training done", flush=True)
