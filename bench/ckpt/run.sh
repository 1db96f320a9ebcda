#!/bin/sh
# Build vramguard and run the checkpoint benchmark (needs python3-torch).
#   bench/ckpt/run.sh [--mib N] [--count K]
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_build
/usr/bin/python3 bench/ckpt/bench.py "$tmp/vramguard" "$@"
