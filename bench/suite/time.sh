#!/usr/bin/env bash
# bench/suite/time.sh [N]: the README's test command (scripts/test.sh), N times
# (default 3), each in a fresh clone of HEAD, with test results not cached
# (-count=1; the build cache is kept, as a contributor's machine keeps it).
# For each run: the wall time, the tests that passed (top-level and
# subtests, from go test -json) and the slowest packages; then the median of
# the totals, for docs/PERFORMANCE.md. KEEP=DIR keeps each run's go test
# -json log there (suite-N.json): when each test started and ended.
set -euo pipefail
n=${1:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -e "$root/../shared" ] && ln -s "$(cd "$root/../shared" && pwd)" "$work/shared"
totals=()
for i in $(seq "$n"); do
  git clone -q "$root" "$work/clone-$i"
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  start=$(date +%s.%N)
  rc=0
  (cd "$work/clone-$i" && GOFLAGS=-count=1 scripts/test.sh -json ./...) >"$work/log-$i.json" 2>"$work/err-$i" || rc=$?
  end=$(date +%s.%N)
  total=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')
  totals+=("$total")
  python3 - "$work/log-$i.json" "$i" "$total" "$load" <<'PY'
import json, sys
path, i, total, load = sys.argv[1:]
passed = failed = skipped = 0
pkgs, outs, failures = {}, {}, []
for line in open(path):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    a, t = e.get("Action"), e.get("Test")
    if t and a == "output":
        outs.setdefault((e["Package"], t), []).append(e["Output"])
    if t and a == "fail":
        failures.append((e["Package"], t))
    if t:
        passed += a == "pass"; failed += a == "fail"; skipped += a == "skip"
    elif a in ("pass", "fail") and "Elapsed" in e:
        pkgs[e["Package"]] = (e["Elapsed"], a)
print(f"run {i}: {total} s wall (load before {load}); tests {passed} passed, {failed} failed, {skipped} skipped")
for p, (el, a) in sorted(pkgs.items(), key=lambda kv: -kv[1][0])[:8]:
    print(f"  {el:7.1f} s  {a:4}  {p}")
for key in failures:  # what a failed test printed, its last 60 lines
    print(f"--- {key[1]} ({key[0]}):")
    print("".join(outs.get(key, [])[-60:]), end="")
PY
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$work/log-$i.json" "$KEEP/suite-$i.json"; }
  [ "$rc" -eq 0 ] || { grep -v '"Action":"output"' "$work/log-$i.json" | grep '"fail"' | head -20; cat "$work/err-$i"; echo "run $i failed (rc $rc)" >&2; exit 1; }
  rm -rf "$work/clone-$i"
done
printf '%s\n' "${totals[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median of %d: %.0f s (min %.0f, max %.0f)\n", NR, a[int((NR+1)/2)], a[1], a[NR]}'
