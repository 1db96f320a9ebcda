#!/usr/bin/env bash
# bench/suite/cpu.sh [PACKAGE...]: each test package alone (default: every
# package of ./...), in a cgroup of its own, with test results not cached:
# its wall time and the CPU time (user + system) of everything it ran, the
# jobs its tests started included.
# bench/suite/cpu.sh -tests PACKAGE: the same for each top-level test of
# PACKAGE alone (its test binary built once; each line includes one
# TestMain). Needs root (it makes the cgroups) and the
# test packages installed (scripts/test.sh --setup). For docs/PERFORMANCE.md's
# "Test suite" table; the whole command's wall time is bench/suite/time.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" -eq 0 ] || { echo "bench/suite/cpu.sh: needs root (it makes a cgroup per package)" >&2; exit 2; }
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  base=/sys/fs/cgroup; v=2
else
  base=/sys/fs/cgroup/cpuacct; v=1
fi
logs=$(mktemp -d)
tests=
if [ "${1:-}" = -tests ]; then
  [ $# -eq 2 ] || { echo "usage: bench/suite/cpu.sh -tests PACKAGE" >&2; exit 2; }
  tests=$2
  go test -c -o "$logs/pkg.test" "$tests"
  dir=$(go list -f '{{.Dir}}' "$tests")
  set -- $("$logs/pkg.test" -test.list '.*' | grep '^Test')
fi
[ $# -gt 0 ] || set -- $(go list ./... | sed "s|^$(go list -m)|.|")
total=0
printf '%-40s %8s %8s  %s\n' "${tests:+test of }${tests:-package}" wall_s cpu_s status
for p in "$@"; do
  cg=$base/vramguard-suite-$$-$RANDOM
  mkdir "$cg"
  start=$(date +%s.%N)
  rc=0
  if [ -n "$tests" ]; then
    run="cd $dir && exec $logs/pkg.test -test.run '^$p\$' -test.count=1"
  else
    run="exec go test -count=1 $p"
  fi
  bash -c "echo \$\$ > $cg/cgroup.procs; $run" >"$logs/$(echo "$p" | tr / _).log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  if [ $v = 2 ]; then
    cpu=$(awk '$1 == "usage_usec" {printf "%.1f", $2 / 1e6}' "$cg/cpu.stat")
  else
    cpu=$(awk '{printf "%.1f", $1 / 1e9}' "$cg/cpuacct.usage")
  fi
  rmdir "$cg" 2>/dev/null || true
  total=$(awk -v a="$total" -v b="$cpu" 'BEGIN {printf "%.1f", a + b}')
  printf '%-40s %8.1f %8.1f  %s\n' "$p" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" "$cpu" "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc, $logs)")"
done
echo "total CPU: $total s (logs in $logs)"
