# A DataLoader worker that dies: torch's main process raises
# "DataLoader worker (pid(s) N) exited unexpectedly".
import os
import torch
from torch.utils.data import DataLoader, Dataset

class DS(Dataset):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        if i == 5:
            os._exit(1)
        return torch.zeros(2)

for batch in DataLoader(DS(), batch_size=2, num_workers=2):
    pass
