#!/usr/bin/env bash
# Side-by-side overhead of one full GPU sample: vramguard's sampler (sim GPUs,
# live /proc, cgroups) against psutil iterating the same processes.
# Needs: go, /usr/bin/python3 with python3-psutil (apt-get install python3-psutil).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-200}
ITERS=${ITERS:-30}
echo "== vramguard (go test -bench FullSample, 8 simulated GPUs, $N GPU processes)"
go test -run '^$' -bench 'FullSample' -benchtime "${ITERS}x" ./internal/sampler/ | grep -E '^Benchmark'
echo "== psutil ($N processes)"
/usr/bin/python3 bench/gpu/psutil_sample.py "$N" "$ITERS"
