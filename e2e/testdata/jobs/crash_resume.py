# A training loop that checkpoints every step and crashes at a random step
# until it reaches the end; it resumes from the path given as argv[2].
import os, random, sys, time, torch
ckdir, resume = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
total = 12
step = 0
if resume:
    step = torch.load(resume)["step"]
    print(f"resumed from {resume} at step {step}", flush=True)
random.seed(os.getpid())
crash_at = step + random.randint(2, 5)
while step < total:
    step += 1
    torch.save({"step": step, "w": torch.randn(64)}, os.path.join(ckdir, f"ckpt-{step:04d}.pt"))
    if step == crash_at and step < total:
        print(f"crashing at step {step}", flush=True)
        # A crash mid-save leaves a truncated newest file behind: the next
        # save's first half, without its zip central directory.
        nxt = os.path.join(ckdir, f"ckpt-{step+1:04d}.pt")
        torch.save({"step": step + 1, "w": torch.randn(64)}, nxt)
        data = open(nxt, "rb").read()
        with open(nxt, "wb") as f:
            f.write(data[: len(data) // 2])
        os._exit(1)
print(f"done at step {step}", flush=True)
