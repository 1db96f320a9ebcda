# The probe's steady-state cost on a training loop, measured inside one
# probed process: blocks of optimizer steps alternate between the sampler
# running (at each rate) and stopped, so load changes on a shared machine
# hit both sides of every pair. Prints the median, over pairs, of
# (block with sampler / block without - 1), and the min/max of the pairs.
import json
import statistics
import sys

import mlp
import torch

from vramguard import _probe

pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
block_s = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
p = _probe._p
assert p is not None and p.reporting(), "probe not running"

steps = mlp.loop()

p.stop_thread(2.0)
steps(20)  # warm-up
per = steps(20) / 20
n = max(int(block_s / per), 10)
out = {"steps_per_block": n, "torch": torch.__version__}
for hz in (1.0, 20.0):
    p.cfg.hz = hz
    ratios = []
    for i in range(pairs):
        # Alternate which side goes first.
        order = (True, False) if i % 2 == 0 else (False, True)
        t = {}
        for on in order:
            if on:
                p.start_thread()
            t[on] = steps(n)
            if on:
                p.stop_thread(2.0)
        ratios.append(t[True] / t[False] - 1)
    out["%g Hz" % hz] = {
        "median_pct": statistics.median(ratios) * 100,
        "min_pct": min(ratios) * 100,
        "max_pct": max(ratios) * 100,
        "pairs": pairs,
    }
print(json.dumps(out))
