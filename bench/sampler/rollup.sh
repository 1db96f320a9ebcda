#!/usr/bin/env bash
# bench/sampler/rollup.sh [GIB] [SECONDS]: what watching one job that holds
# GIB GiB of host memory (default 8) costs at the default 1 s sample
# interval, over SECONDS (default 30), side by side on the same process:
#
#   vramguard run        its supervisor's CPU (utime + stime, /proc/PID/stat)
#   psutil               memory_full_info() once a second, what a psutil-based
#                        monitor reads for PSS and USS (the whole smaps)
#   smaps_rollup         one read of /proc/PID/smaps_rollup a second: what
#                        the sampler did before its budget (rollup.go)
#
# Each figure is CPU time per second of wall time: the share of one core.
# Needs go, /usr/bin/python3 with python3-psutil, and GIB GiB of free memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
gib=${1:-8}
secs=${2:-30}
. bench/lib.sh
bench_build 'kill $sup 2>/dev/null || true; wait 2>/dev/null || true'
tick=$(getconf CLK_TCK)
cpu() { awk -v t="$tick" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / t }' "/proc/$1/stat"; }

VRAMGUARD_HOME="$tmp/home" "$tmp/vramguard" run --no-probe --sample-interval 1s -- /usr/bin/python3 -c "
import sys, time
b = bytearray($gib << 30)
for i in range(0, len(b), 4096):
    b[i] = 1
open('$tmp/ready', 'w').write('x')
time.sleep($secs * 3 + 30)
" >/dev/null 2>&1 &
sup=$!
while [ ! -e "$tmp/ready" ]; do sleep 0.5; done
job=$(pgrep -f "bytearray\($gib << 30\)" | while read -r p; do [ "$(cat /proc/$p/comm)" = python3 ] && echo "$p"; done | head -1)
sleep 3 # the first samples read every process at once
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, kernel $(uname -r), job pid $job holding $(awk '/VmRSS/ {printf "%.1f GiB", $2/1048576}' /proc/$job/status), ${secs} s each, load $(cut -d' ' -f1-3 /proc/loadavg)"
c0=$(cpu $sup); t0=$(date +%s.%N)
sleep "$secs"
c1=$(cpu $sup); t1=$(date +%s.%N)
awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" 'BEGIN { printf "vramguard run (supervisor)       %6.1f%% of a core\n", 100 * (b - a) / (e - s) }'
/usr/bin/python3 - "$job" "$secs" <<'PY'
import sys, time
import psutil
pid, secs = int(sys.argv[1]), int(sys.argv[2])
p = psutil.Process(pid)
def every_second(f):
    c0, t0 = time.process_time(), time.monotonic()
    while time.monotonic() - t0 < secs:
        n = time.monotonic()
        f()
        time.sleep(max(0, 1 - (time.monotonic() - n)))
    return (time.process_time() - c0) / (time.monotonic() - t0)
print("psutil memory_full_info() at 1 Hz %6.1f%% of a core" % (100 * every_second(p.memory_full_info)))
print("smaps_rollup read at 1 Hz        %6.1f%% of a core" % (100 * every_second(lambda: open("/proc/%d/smaps_rollup" % pid).read())))
PY
