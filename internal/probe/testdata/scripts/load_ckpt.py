# Loads a checkpoint with torch and prints what it holds, as JSON. With
# RESAVE=1 it then saves it again to the same path (to let the probe clean
# up staging directories that a killed save left behind).
import json
import os
import sys

import torch

path = sys.argv[1]
try:
    ck = torch.load(path)
    res = {"ok": True, "marker": ck["marker"], "sum": float(ck["t"].double().sum()), "n": ck["t"].numel()}
except Exception as e:
    res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
if os.environ.get("RESAVE") == "1" and res["ok"]:
    torch.save(ck, path)
print(json.dumps(res))
