# Two ranks under torch.multiprocessing.spawn (gloo, a file store): both
# join the process group, then rank 1 raises. The parent prints mp.spawn's
# report and exits 1; its last stdout line says which pid was which rank.
import json
import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank, store, out):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    with open("%s.%d" % (out, rank), "w") as f:
        f.write(str(os.getpid()))
    dist.barrier()
    if rank == 1:
        raise ValueError("rank one fails")
    dist.destroy_process_group()


if __name__ == "__main__":
    store, out = sys.argv[1], sys.argv[2]
    try:
        mp.spawn(work, args=(store, out), nprocs=2)
    finally:
        pids = {r: int(open("%s.%d" % (out, r)).read()) for r in (0, 1)}
        print(json.dumps({"pid": os.getpid(), "ranks": pids}), flush=True)
