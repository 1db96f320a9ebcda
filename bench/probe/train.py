# The training loop the probe overhead benchmark times: a CPU MLP with SGD,
# one intra-op thread so runs are comparable. Prints {"loop_s", "steps"}.
import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 512)
y = torch.randint(0, 10, (64,))
for _ in range(10):  # warm-up, not timed
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
t0 = time.perf_counter()
for _ in range(steps):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
loop = time.perf_counter() - t0
print(json.dumps({"loop_s": loop, "steps": steps}))
