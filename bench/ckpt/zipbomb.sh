#!/bin/sh
# Build vramguard and time `ckpt scan|inspect|verify` and torch.load on the
# zip bomb fixtures (needs python3-torch).
#   bench/ckpt/zipbomb.sh [OLD_VRAMGUARD]
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_build
/usr/bin/python3 bench/ckpt/zipbomb.py "$tmp/vramguard" "$@"
