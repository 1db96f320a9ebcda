# A small real CPU training loop, as a user would write it: a forked
# DataLoader with two workers, SGD, checkpoints to a path and to a file
# object. The last stdout line is a JSON report for the test.
import io
import json
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

STEPS = int(os.environ.get("TRAIN_STEPS", "24"))
out_dir = sys.argv[1]


class Data(Dataset):
    def __len__(self):
        return STEPS * 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(16, generator=g)
        # Each item also says which process made it and whether that process
        # has CUDA initialised.
        return x, x.sum(), os.getpid(), torch.cuda.is_initialized()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Data(), batch_size=8, num_workers=2, multiprocessing_context="fork")
worker_pids = set()
worker_cuda = False
steps = 0
for x, y, pids, cuda in loader:
    worker_pids.update(int(p) for p in pids)
    worker_cuda = worker_cuda or bool(cuda.any())
    loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps += 1
    if steps == STEPS // 2:
        torch.save(model.state_dict(), os.path.join(out_dir, "half.pt"))

final = os.path.join(out_dir, "final.pt")
torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "steps": steps}, final)
buf = io.BytesIO()
torch.save(model.state_dict(), buf)
print(json.dumps({
    "pid": os.getpid(),
    "steps": steps,
    "worker_pids": sorted(worker_pids),
    "worker_cuda_initialized": worker_cuda,
    "cuda_initialized": torch.cuda.is_initialized(),
    "half_bytes": os.path.getsize(os.path.join(out_dir, "half.pt")),
    "final_bytes": os.path.getsize(final),
    "buffer_bytes": len(buf.getvalue()),
}))
