# The CPU training loop the probe benchmarks time: an MLP with SGD on one
# intra-op thread, so runs are comparable.
import time

import torch


def loop():
    """Builds the model and returns steps(n): n optimizer steps, timed in seconds."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 512)
    y = torch.randint(0, 10, (64,))

    def steps(n):
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return time.perf_counter() - t0

    return steps
