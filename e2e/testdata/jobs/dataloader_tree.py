# A torch DataLoader with two forked workers that share their parent's pages,
# for the tree-figure test (e2e/hostfigures_test.go). Once the workers run it
# writes "MAIN_PID WORKER_PID WORKER_PID" to the file argv[1] and keeps
# loading batches, its memory steady, until the file argv[2] appears (five
# minutes at most).
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

# Written once before the fork: the workers share these pages copy-on-write,
# so an RSS sum counts them three times and a PSS sum once.
shared = bytearray(64 << 20)
for i in range(0, len(shared), 4096):
    shared[i] = 1


class Items(Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        return torch.tensor([shared[(i * 4096) % len(shared)]])


def main():
    ready, stop = sys.argv[1], sys.argv[2]
    it = iter(DataLoader(Items(), batch_size=8, num_workers=2, multiprocessing_context="fork"))
    next(it)
    pids = [os.getpid()] + [w.pid for w in it._workers]
    with open(ready + ".tmp", "w") as f:
        f.write(" ".join(map(str, pids)))
    os.rename(ready + ".tmp", ready)
    end, n = time.time() + 300, 0
    while time.time() < end and not os.path.exists(stop):
        next(it)
        n += 1
        time.sleep(0.01)
    print("batches", n, flush=True)


if __name__ == "__main__":
    main()
