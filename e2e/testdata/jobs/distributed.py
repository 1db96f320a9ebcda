# A 3-rank data-parallel job on the CPU (torch.distributed, gloo) whose middle
# rank (1) fails the way MODE says while the others wait for it in an
# all_reduce:
#
#   distributed.py spawn MODE PORT    3 ranks under torch.multiprocessing.spawn
#   distributed.py launch MODE PORT   a plain launcher: 3 processes with the
#                                     environment torchrun gives its workers
#   distributed.py rank MODE          one rank of it (RANK, WORLD_SIZE, ... set)
#
# MODE: exc   rank 1 raises a CUDA out-of-memory error (PyTorch's message)
#       oom   rank 1 allocates host memory until the OOM killer kills it
#       segv  rank 1 dies of SIGSEGV
#       stall rank 1 stops stepping at step 5 (waits for data that never comes)
import datetime
import os
import signal
import subprocess
import sys
import time

WORLD = 3
FAILS = 1  # the rank that fails: neither the first nor the last
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
    "13.20 GiB already allocated; 1.50 GiB free; 13.50 GiB reserved in total by PyTorch)"
)


def wait_for_the_next_batch():
    time.sleep(600)


def train(rank, mode):
    import torch
    import torch.distributed as dist

    # long enough for the ranks importing torch at once on a busy machine;
    # the ranks that wait for the failing one learn of its death from their
    # sockets
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 1000 if mode == "stall" else 3
    for step in range(steps):
        if mode == "stall" and rank == FAILS and step == 5:
            print("rank %d waits for its next batch" % rank, flush=True)
            wait_for_the_next_batch()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        t = torch.ones(1)
        dist.all_reduce(t)
        time.sleep(0.4)  # the probe samples the step count in between
    print("rank %d trained %d steps" % (rank, steps), flush=True)
    if rank == FAILS:
        if mode == "exc":
            raise RuntimeError(OOM_MESSAGE)
        if mode == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "oom":
            hold = []
            while True:
                hold.append(bytearray(16 << 20))
    t = torch.ones(1)
    dist.all_reduce(t)  # the failing rank never comes
    print("rank %d done" % rank, flush=True)


def spawned(i, mode, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    train(i, mode)


def main():
    how, mode = sys.argv[1], sys.argv[2]
    if how == "rank":
        train(int(os.environ["RANK"]), mode)
    elif how == "spawn":
        import torch.multiprocessing as mp

        mp.spawn(spawned, args=(mode, sys.argv[3]), nprocs=WORLD)
    elif how == "launch":
        procs = []
        for r in range(WORLD):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3], RANK=str(r), LOCAL_RANK=str(r),
                       WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), GROUP_RANK="0")
            procs.append(subprocess.Popen([sys.executable, __file__, "rank", mode], env=env))
        codes = [p.wait() for p in procs]
        sys.exit(next((1 for c in codes if c != 0), 0))


if __name__ == "__main__":
    main()
