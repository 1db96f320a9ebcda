# Per-operation costs of the probe, measured inside a probed process (run by
# bench/probe with the probe on PYTHONPATH and a listening socket). These
# are robust on a busy machine where whole-loop timings are not: the
# probe's steady-state cost is (sample cost x rate) + (step hook x steps/s).
import json
import statistics
import sys
import time

import torch

from vramguard import _probe

p = _probe._p
assert p is not None and p.reporting(), "probe not running"


def per_call(fn, n):
    best = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n)
    return statistics.median(best)


# One sample as the sampler thread takes it: RSS, counters, CUDA check,
# JSON encoding and a non-blocking send.
sample_s = per_call(lambda: p.send(p.sample()), 2000)

# The optimizer step hook: what the probe adds to every optimizer.step().
opt_mod = sys.modules["torch.optim.optimizer"]
hooked = opt_mod.Optimizer._optimizer_step_code
model = torch.nn.Linear(2, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.0)
with_hook = per_call(lambda: hooked(opt), 200000)
orig = hooked.__closure__[0].cell_contents if hooked.__closure__ else hooked
without_hook = per_call(lambda: orig(opt), 200000)

print(json.dumps({
    "torch": torch.__version__,
    "step_hook": "step_code" if hooked is not orig else "post_hook",
    "sample_us": sample_s * 1e6,
    "step_hook_ns": max(with_hook - without_hook, 0.0) * 1e9,
}))
