#!/bin/sh
# Build vramguard and time `ckpt` on inputs built to cost much (see
# bounds.py), next to the loaders users run on them.
#   bench/ckpt/bounds.sh [OLD_VRAMGUARD]
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_build
/usr/bin/python3 bench/ckpt/bounds.py "$tmp/vramguard" "$@"
