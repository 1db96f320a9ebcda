#!/usr/bin/env bash
# gpu-check.sh: what vramguard sees on a machine WITH an NVIDIA GPU.
#
# 1. builds vramguard (cgo, NVML through go-nvml),
# 2. prints `vramguard top --once --json` read through NVML,
# 3. runs a short real PyTorch CUDA training loop with a
#    DataLoader(num_workers=2) under `vramguard run` in the background and
#    samples `top --once --json` while it runs, to show the workers rolled up
#    under the job,
# 4. runs the probe's CUDA checks and the notebook side's (scripts/gpu-notebook-check.py),
# 5. records real memory snapshots (a training loop, an OOM) and checks
#    `vramguard snapshot` against torch's own totals (scripts/gpu-snapshot-check.py),
# 6. prints a summary of what it saw.
#
# Finishes in about 5 minutes at most. Outputs go under $OUT when set (else a
# temporary directory). Needs: go, gcc, an NVIDIA driver, python3 with torch
# (PYTHON=/path/to/python to choose; default /usr/bin/python3), jq optional.
set -uo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PYTHON=${PYTHON:-/usr/bin/python3}
DEADLINE=$((SECONDS + 290))
log() { printf '== %s\n' "$*" | tee -a "$OUT/summary.txt"; }

log "gpu-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L 2>&1 | tee "$OUT/nvidia-smi-L.txt" || log "nvidia-smi not available"

log "build"
if ! CGO_ENABLED=1 go build -o "$OUT/vramguard" ./cmd/vramguard 2> >(grep -v -e warning -e note: -e '^ ' -e cgo-gcc >&2); then
  log "build failed"; exit 1
fi
VG="$OUT/vramguard"
export VRAMGUARD_HOME="$OUT/home"

log "top --once --json via NVML (idle)"
timeout 30 "$VG" top --once --json --gpu-backend nvml > "$OUT/top-idle.json" 2> "$OUT/top-idle.err"
rc=$?
cat "$OUT/top-idle.json"; cat "$OUT/top-idle.err" >&2
log "exit $rc; devices: $(jq -c '[.devices[] | {index, name, total_bytes, used_bytes, mig: (.parent_uuid != null)}]' "$OUT/top-idle.json" 2>/dev/null)"

cat > "$OUT/train.py" <<'PY'
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Synthetic(Dataset):
    def __len__(self): return 100000
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 64, 64, generator=g), i % 10

def main():
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Synthetic(), batch_size=256, num_workers=2, persistent_workers=True)
    stop = time.time() + float(os.environ.get("TRAIN_SECONDS", "60"))
    step = 0
    print(f"pid {os.getpid()} training on {torch.cuda.get_device_name(0)}", flush=True)
    while time.time() < stop:
        for x, y in loader:
            x, y = x.to(dev, non_blocking=True), y.to(dev)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            step += 1
            if step % 50 == 0:
                print(f"step {step} loss {loss.item():.3f} allocated {torch.cuda.memory_allocated()>>20} MiB", flush=True)
            if time.time() >= stop:
                break
    print("done", flush=True)

if __name__ == "__main__":
    main()
PY

log "training under vramguard run (60 s, DataLoader num_workers=2)"
TRAIN_SECONDS=60 timeout 150 "$VG" run -- "$PYTHON" "$OUT/train.py" > "$OUT/run.log" 2>&1 &
RUN_PID=$!
n=0
while kill -0 "$RUN_PID" 2>/dev/null && [ $SECONDS -lt $DEADLINE ]; do
  sleep 5
  n=$((n + 1))
  timeout 20 "$VG" top --once --json --gpu-backend nvml > "$OUT/top-$n.json" 2>> "$OUT/top-during.err"
  jq -c '{t: .time, jobs: [.jobs[] | {kind, name, root_pid, gpu_bytes, rss_bytes,
      processes: [.processes[] | {pid, comm, role, gpu_bytes}]}]}' "$OUT/top-$n.json" 2>/dev/null \
    | tee -a "$OUT/during.jsonl"
done
wait "$RUN_PID"; run_rc=$?
log "vramguard run exited $run_rc; last lines of its output:"
tail -n 15 "$OUT/run.log" | tee -a "$OUT/summary.txt"

# The verdict: did some sample show the training job with its two
# DataLoader workers listed under it?
best=$(for f in "$OUT"/top-[0-9]*.json; do
  jq -r '.jobs[] | select([.processes[] | select(.role=="worker")] | length >= 2)
         | "\(.kind) \(.name) root=\(.root_pid) gpu=\(.gpu_bytes) procs=\([.processes[] | "\(.pid):\(.role)"] | join(","))"' "$f" 2>/dev/null
done | head -n 1)
if [ -n "$best" ]; then
  log "ROLLED UP: $best"
else
  log "NOT SEEN: no sample showed a job with 2 DataLoader workers under it (see $OUT/during.jsonl)"
fi
log "explain --json of the supervised run (probe: allocator numbers from inside PyTorch)"
timeout 20 "$VG" explain --json last > "$OUT/explain.json" 2>&1
jq -c '{reason, probe: (.probe | {samples, optimizer_steps, peak_allocated_bytes, peak_reserved_bytes, num_alloc_retries}), memory}' "$OUT/explain.json" 2>/dev/null | tee -a "$OUT/summary.txt"

if [ $SECONDS -lt $((DEADLINE - 60)) ]; then
  log "probe against a real CUDA job (samples vs memory_stats, steps, OOM observer and snapshot sites, checkpoints, forked workers)"
  timeout $((DEADLINE - SECONDS)) go run ./bench/probe/gpucheck -python "$PYTHON" 2>&1 | tee "$OUT/probe-gpucheck.txt" | tail -n 30
fi
if [ $SECONDS -lt $((DEADLINE - 20)) ]; then
  log "notebook side on CUDA (%vramguard: per-cell peaks kept for max_memory_allocated, who's footer, free's empty_cache)"
  PYDIR=$("$VG" python-path 2>/dev/null)
  PYTHONPATH="$PYDIR" timeout $((DEADLINE - SECONDS)) "$PYTHON" scripts/gpu-notebook-check.py 2>&1 | tee "$OUT/notebook-cuda.txt" | tail -n 20
  log "notebook side: $(grep -c '^PASS' "$OUT/notebook-cuda.txt") passed, $(grep -c '^FAIL' "$OUT/notebook-cuda.txt") failed"
fi
if [ $SECONDS -lt $((DEADLINE - 15)) ]; then
  log "memory snapshots: vramguard snapshot against torch.cuda.memory._snapshot()'s own totals"
  timeout $((DEADLINE - SECONDS)) "$PYTHON" scripts/gpu-snapshot-check.py "$VG" "$OUT" 2>&1 | tee "$OUT/snapshot-check.txt" | tail -n 20
  log "snapshots: $(grep -c '^PASS' "$OUT/snapshot-check.txt") passed, $(grep -c '^FAIL' "$OUT/snapshot-check.txt") failed"
fi
log "outputs in $OUT"
