#!/usr/bin/env bash
# Output throughput of a job under `vramguard run` against what users run
# today: the same job into a plain file, and through `tee` into a file.
# Usage: bench/run/throughput.sh [MB] [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
MB=${1:-500}
REPS=${2:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/vramguard" ./cmd/vramguard
# A fast writer of 100-byte lines.
gen="yes 'epoch 1 step 123 loss 0.123456 lr 0.0003 grad_norm 1.2345 tokens/s 12345.6 ......................' | head -c ${MB}M"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
timeit() { # prints seconds for one run of "$@"
  local s e
  s=$(date +%s.%N); "$@"; e=$(date +%s.%N)
  echo "$e - $s" | bc -l
}
plain() { sh -c "$gen" > "$tmp/plain.out"; }
teed() { sh -c "$gen" | tee "$tmp/tee.out" > /dev/null; }
vg() { VRAMGUARD_HOME="$tmp/home" "$tmp/vramguard" run -- sh -c "$gen" > /dev/null 2>&1; }

printf '%-34s %10s %10s\n' "way ($MB MB of 100-byte lines)" "median s" "MB/s"
for way in plain teed vg; do
  ts=$(for _ in $(seq "$REPS"); do timeit $way; done | median)
  case $way in plain) name="sh > file";; teed) name="sh | tee file > /dev/null";; vg) name="vramguard run -- sh > /dev/null";; esac
  printf '%-34s %10.3f %10.0f\n' "$name" "$ts" "$(echo "$MB / $ts" | bc -l)"
done
log=$(ls "$tmp"/home/runs/*/attempt-1.log | head -1)
echo "vramguard log file: $(du -m "$log" | cut -f1) MB for $MB MB of output (timestamp and stream per line)"
