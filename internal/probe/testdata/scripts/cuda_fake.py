# A training loop whose torch.cuda is the fake from ../fakecuda: CUDA gets
# "initialised", the probe samples the replayed memory_stats, then the
# allocator runs out. MODE=excepthook leaves the OOM uncaught (the job dies
# the way it would); MODE=observer catches it, as a loop that retries with a
# smaller batch does, and exits 0.
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "fakecuda"))

import torch  # noqa: E402

import fakecuda  # noqa: E402

mode = os.environ["MODE"]
fakecuda.install(os.path.join(here, "..", "memory_stats", "h100_finetune.json"), observer=(mode == "observer"))

model = torch.nn.Linear(8, 8)
opt = torch.optim.Adam(model.parameters())
for _ in range(3):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()

fakecuda.init()
if not fakecuda.wait_samples(3):
    print("sampler never called memory_stats", file=sys.stderr)
    sys.exit(97)

print(json.dumps({"pid": os.getpid()}), flush=True)
if mode == "observer":
    try:
        fakecuda.oom()
    except torch.cuda.OutOfMemoryError:
        print("caught OOM, retrying with a smaller batch")
else:
    fakecuda.oom()
