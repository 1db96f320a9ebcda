# The job the GPU check runs under the probe: a forked DataLoader before CUDA
# is touched, a CUDA training loop, a large live allocation on a known line,
# a real CUDA OOM (caught, as a retrying loop would), and a checkpoint.
# Prints a JSON report on its last stdout line.
import inspect
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

run_dir = sys.argv[1]
STEPS = 50
report = {"torch": torch.__version__, "cuda_before_loader": torch.cuda.is_initialized()}


class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.randn(256), torch.cuda.is_initialized()


worker_cuda = False
for _x, flags in DataLoader(Data(), batch_size=16, num_workers=2, multiprocessing_context="fork"):
    worker_cuda = worker_cuda or bool(flags.any())
report["worker_cuda_initialized"] = worker_cuda
report["cuda_after_loader"] = torch.cuda.is_initialized()

dev = torch.device("cuda", 0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(dev)
opt = torch.optim.Adam(model.parameters())
x = torch.randn(512, 4096, device=dev)
for _ in range(STEPS):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
report["steps"] = STEPS

big_line = inspect.currentframe().f_lineno + 1
big = torch.empty(4 << 30, dtype=torch.uint8, device=dev)  # the largest live allocation
report["big_line"] = big_line
report["script"] = os.path.abspath(__file__)

st = torch.cuda.memory_stats(0)
free, total = torch.cuda.mem_get_info(0)
report["allocated_bytes"] = st["allocated_bytes.all.current"]
report["reserved_bytes"] = st["reserved_bytes.all.current"]
report["total_bytes"] = total
report["has_requested"] = "requested_bytes.all.current" in st

# Let the probe take a few samples of this state (it samples at 20 Hz).
from vramguard import _probe  # noqa: E402

p = _probe._p
seq0 = p.seq if p else 0
deadline = time.monotonic() + 10
while p and p.seq < seq0 + 3 and time.monotonic() < deadline:
    time.sleep(0.01)

try:
    torch.empty(total * 2, dtype=torch.uint8, device=dev)
    report["oom"] = False
except RuntimeError as e:  # torch.cuda.OutOfMemoryError on torch >= 1.13
    report["oom"] = "out of memory" in str(e)

ck = os.path.join(run_dir, "ck.pt")
torch.save(model.state_dict(), ck)
report["ckpt_bytes"] = os.path.getsize(ck)
del big
print(json.dumps(report))
