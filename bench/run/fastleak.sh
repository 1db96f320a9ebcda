#!/usr/bin/env bash
# Time to the first OOM forecast against time to the kill, for real CPU jobs
# (Debian's python3 with torch) leaking host memory at several rates under
# --memory-limit. Each job keeps a tensor of RATE/2 MiB every half second
# until the kernel kills it; the forecast time is the first oom_forecast
# event of the run, the kill time the run's end, both from the attempt's
# start. Baseline: the same runs with the runway forecast unavailable would
# show only the near-limit notice (host memory at 90% of its limit).
# Usage: bench/run/fastleak.sh [LIMIT] [RATE_MiB_per_s...]   (default 600m; 1.2 2 3.3 6)
set -euo pipefail
cd "$(dirname "$0")/../.."
LIMIT=${1:-600m}
shift || true
RATES=${*:-1.2 2 3.3 6}
. bench/lib.sh
bench_build
py=${VRAMGUARD_TEST_PYTHON:-/usr/bin/python3}
printf '%-12s %-8s %-16s %-12s %-10s %s\n' "rate MiB/s" limit "first forecast" "kill" "lead/T" "ETA at forecast"
for r in $RATES; do
  home="$tmp/home-$r"
  n=$(python3 -c "print(int($r * 1048576 / 2 / 4))")
  VRAMGUARD_HOME=$home "$tmp/vramguard" run --name leak --gpu-backend none --memory-limit "$LIMIT" -- "$py" -c "
import time, torch
keep = []
while True:
    keep.append(torch.ones($n))
    time.sleep(0.5)
" > /dev/null 2>&1 || true
  VRAMGUARD_HOME=$home "$tmp/vramguard" explain --json leak > "$tmp/pm.json"
  python3 - "$tmp/pm.json" "$r" "$LIMIT" <<'PY'
import json, sys
from datetime import datetime
d = json.load(open(sys.argv[1]))
def ts(s): return datetime.fromisoformat(s.replace("Z", "+00:00"))
start, end = ts(d["started_at"]), ts(d["ended_at"])
T = (end - start).total_seconds()
f = (d.get("monitor") or {}).get("oom_forecast")
if not f:
    print(f"{sys.argv[2]:<12} {sys.argv[3]:<8} {'none':<16} {T:<12.0f} {'-':<10} -")
else:
    t = f["detected_at_s"]
    print(f"{sys.argv[2]:<12} {sys.argv[3]:<8} {t:<16.0f} {T:<12.0f} {(T - t) / T:<10.2f} {f['oom_eta_s']:.0f}s ({d['reason']})")
PY
done
