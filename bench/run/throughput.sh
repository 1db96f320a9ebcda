#!/usr/bin/env bash
# Output throughput of a job under `vramguard run` against what users run
# today: the same job into a plain file, and through `tee` into a file. The
# three ways take turns within each repetition (plain, tee, vramguard run,
# then the next repetition), so a change of load on the machine hits all
# three alike; the median of each is reported, and vramguard's rate as a
# fraction of tee's. Before each run the previous outputs are deleted and
# `sync` flushes what is left, so no run pays for another's writeback.
# Usage: bench/run/throughput.sh [MB] [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
MB=${1:-500}
REPS=${2:-5}
. bench/lib.sh
bench_build
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
# vramguard's fixed cost: start-up and teardown of a run whose job writes nothing.
vgstart() { VRAMGUARD_HOME="$tmp/home" "$tmp/vramguard" run -- true > /dev/null 2>&1; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# The first run in a new home creates the state database.
printf 'first vramguard run -- true in a new home: %.3f s\n' "$(timeit vgstart)"
for i in $(seq "$REPS"); do
  for way in plain teed vgstart vg; do
    # Each run starts alike: the previous outputs (and vramguard's logs)
    # gone and written back, so no run pays for another's dirty pages. The
    # state database stays, as it does for users: only the first run in a
    # new $VRAMGUARD_HOME creates it (about 25 ms more, timed below).
    rm -rf "$tmp/plain.out" "$tmp/tee.out" "$tmp/home/runs"
    sync
    t=$(timeit $way)
    echo "$t" >> "$tmp/$way.times"
    printf 'rep %d %-6s %6.3f s\n' "$i" "$way" "$t"
  done
done
printf '%-34s %10s %10s\n' "way ($MB MB of 100-byte lines)" "median s" "MB/s"
for way in plain teed vg; do
  ts=$(median < "$tmp/$way.times")
  echo "$ts" > "$tmp/$way.median"
  case $way in plain) name="sh > file";; teed) name="sh | tee file > /dev/null";; vg) name="vramguard run -- sh > /dev/null";; esac
  printf '%-34s %10.3f %10.0f\n' "$name" "$ts" "$(echo "$MB / $ts" | bc -l)"
done
printf 'vramguard run / tee: %.2f of tee'"'"'s rate (medians)\n' "$(echo "$(cat "$tmp/teed.median") / $(cat "$tmp/vg.median")" | bc -l)"
start=$(median < "$tmp/vgstart.times")
printf 'vramguard run -- true (start-up and teardown): %.3f s; output rate after it: %.0f MB/s, %.2f of tee'"'"'s\n' \
  "$start" "$(echo "$MB / ($(cat "$tmp/vg.median") - $start)" | bc -l)" \
  "$(echo "$(cat "$tmp/teed.median") / ($(cat "$tmp/vg.median") - $start)" | bc -l)"
log=$(ls "$tmp"/home/runs/*/attempt-1.log | head -1)
echo "vramguard log file: $(du -m "$log" | cut -f1) MB for $MB MB of output (a timestamp, stream and byte count per chunk)"
