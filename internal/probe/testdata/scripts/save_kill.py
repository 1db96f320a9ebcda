# Saves a checkpoint to PATH, then starts a second, large torch.save to the
# same PATH whose pickling blocks on stdin after the file has been opened:
# the test SIGKILLs the process there, in the middle of that save.
import os
import sys

import torch

path = sys.argv[1]
print("pid", os.getpid(), flush=True)
big = torch.arange(8 << 20, dtype=torch.float32)  # 32 MiB
torch.save({"marker": "first", "t": big}, path)
print("first saved", flush=True)


def _block():
    print("saving second", flush=True)
    sys.stdin.read()  # never returns: the test kills us here


class Blocker:
    def __reduce__(self):
        _block()
        return (int, (0,))


torch.save({"marker": "second", "t": big * 2, "z": Blocker()}, path)
print("second saved", flush=True)
