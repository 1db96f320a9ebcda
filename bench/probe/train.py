# The training loop the probe overhead benchmark times (mlp.py). Prints
# {"loop_s", "steps"}.
import json
import sys

import mlp

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
run = mlp.loop()
run(10)  # warm-up, not timed
loop = run(steps)
print(json.dumps({"loop_s": loop, "steps": steps}))
