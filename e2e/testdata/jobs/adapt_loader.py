# A DataLoader job for run --adapt: argv[1] workers load 4 MiB samples in
# batches of 4 (16 MiB through /dev/shm per batch). With --ballast MB each
# worker also holds that much memory of its own, touched, as a dataset
# that caches in every worker does.
import sys, torch
from torch.utils.data import DataLoader, Dataset

workers = int(sys.argv[1])
ballast_mb = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--ballast" else 0
held = []


def init(_):
    if ballast_mb:
        held.append(bytearray(b"\1" * (ballast_mb << 20)))


class Samples(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.full((1 << 20,), float(i))


n = 0
for batch in DataLoader(Samples(), batch_size=4, num_workers=workers, worker_init_fn=init):
    n += 1
print(f"done: {n} batches with {workers} workers", flush=True)
