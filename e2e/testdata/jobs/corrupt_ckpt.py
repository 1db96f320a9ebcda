# Loads a checkpoint truncated mid-save: PytorchStreamReader fails to find
# the zip central directory.
import sys, torch
path = sys.argv[1]
torch.save({"w": torch.zeros(1000)}, path)
data = open(path, "rb").read()
open(path, "wb").write(data[: len(data) // 2])
torch.load(path)
