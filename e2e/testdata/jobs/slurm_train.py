# train.py for a Slurm job: one rank per task (SLURM_PROCID of SLURM_NTASKS),
# gloo across the job's nodes (MASTER_ADDR:MASTER_PORT, rank 0's node). The
# rank FAIL_RANK fails at step FAIL_STEP (default 3) the way FAIL_MODE says,
# while the others go on to their next all_reduce and learn of it there:
#
#   kill  it is SIGKILLed
#   oom   it allocates host memory until the OOM killer (its task's
#         --memory-limit) kills it
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist

rank = int(os.environ["SLURM_PROCID"])
world = int(os.environ["SLURM_NTASKS"])
fail = int(os.environ.get("FAIL_RANK", "-1"))
fail_step = int(os.environ.get("FAIL_STEP", "3"))
mode = os.environ.get("FAIL_MODE", "kill")

dist.init_process_group("gloo", init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]),
                        rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
print("rank %d of %d on %s" % (rank, world, os.environ.get("SLURMD_NODENAME", "?")), flush=True)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(200):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == fail and step == fail_step:
        print("rank %d fails at step %d (%s)" % (rank, step, mode), flush=True)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        hold = []
        while True:
            hold.append(bytearray(16 << 20))
    time.sleep(0.3)  # the probe samples the step count in between
print("rank %d done" % rank, flush=True)
