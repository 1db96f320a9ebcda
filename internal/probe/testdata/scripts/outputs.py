# A job with output on both streams, a torch.save, optimizer steps and an
# uncaught exception from its own code: exit status 1 and a traceback.
import os
import sys

import torch

print("epoch 0 start")
print("warning: something to stderr", file=sys.stderr)
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(5):
    loss = model(torch.ones(3, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} loss {loss.item():.6f}")
torch.save(model.state_dict(), os.path.join(sys.argv[1], "m.pt"))
print("saved", os.path.getsize(os.path.join(sys.argv[1], "m.pt")))
sys.stdout.flush()


def validate(x):
    raise ValueError(f"validation failed at {x}")


validate(42)
