#!/bin/sh
# Probe overhead benchmark (needs python3-torch): a CPU training loop without
# the probe and with it at 1 Hz and 20 Hz, interleaved rounds, medians.
#   bench/probe/run.sh [-runs N] [-steps K] [-pairs P] [-agent=false]
set -eu
cd "$(dirname "$0")/../.."
exec go run ./bench/probe "$@"
