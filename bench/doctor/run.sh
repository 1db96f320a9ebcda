#!/bin/sh
# Wall time of `vramguard doctor` on this machine, side by side with the bare
# `import torch` it cannot be faster than. Uses hyperfine when installed,
# otherwise N timed runs each (min / median / max, milliseconds).
#
#   bench/doctor/run.sh [N]        (default N=10; builds ./vramguard first)
set -eu
N=${1:-10}
cd "$(dirname "$0")/../.."
go build -o /tmp/vramguard-bench ./cmd/vramguard
VG=/tmp/vramguard-bench
FIX=internal/doctor/testdata/container.txtar

set -- \
  "import torch (Debian python3-torch, no vramguard)|/usr/bin/python3 -c 'import torch'" \
  "vramguard doctor --python /usr/bin/python3 --dir /tmp|$VG doctor --python /usr/bin/python3 --dir /tmp" \
  "vramguard doctor (python3 on PATH, no torch)|$VG doctor" \
  "vramguard doctor --root container.txtar (no subprocess)|$VG doctor --root $FIX --python /usr/local/bin/python --dir /workspace/ckpt"

if command -v hyperfine >/dev/null 2>&1; then
  for c in "$@"; do
    hyperfine -N -i --warmup 1 --runs "$N" -n "${c%%|*}" "${c#*|}" 2>/dev/null | sed -n '1,3p'
  done
  exit 0
fi

printf '%-58s %8s %8s %8s\n' command min_ms med_ms max_ms
for c in "$@"; do
  name=${c%%|*}; cmd=${c#*|}
  sh -c "$cmd" >/dev/null 2>&1 || true # warm-up
  ts=""
  i=0
  while [ $i -lt "$N" ]; do
    s=$(date +%s%N); sh -c "$cmd" >/dev/null 2>&1 || true; e=$(date +%s%N)
    ts="$ts $(( (e - s) / 1000000 ))"
    i=$((i + 1))
  done
  echo $ts | tr ' ' '\n' | sort -n | awk -v name="$name" '{a[NR]=$1} END {printf "%-58s %8d %8d %8d\n", name, a[1], a[int((NR+1)/2)], a[NR]}'
done
