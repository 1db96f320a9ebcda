#!/bin/sh
# Build vramguard and run the checkpoint benchmark (needs python3-torch).
#   bench/ckpt/run.sh [--mib N] [--count K]
set -eu
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/vramguard" ./cmd/vramguard
/usr/bin/python3 bench/ckpt/bench.py "$out/vramguard" "$@"
