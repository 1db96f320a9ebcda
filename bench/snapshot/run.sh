#!/usr/bin/env bash
# bench/snapshot/run.sh: `vramguard snapshot` on a large memory snapshot,
# side by side with torch's own reader and the file's read time.
#
#   bench/snapshot/run.sh            # a 100 MB snapshot, 3 runs of each
#   MB=20 RUNS=1 bench/snapshot/run.sh
#
# The snapshot is generated (scripts/gen-snapshot-fixtures.py --large: a long
# trace of deep, mostly distinct stacks through a few thousand frames, as a
# long-running job records) into $WORK (default /tmp/vramguard-snapshot-bench)
# and kept there for the next run. Per run it prints wall and CPU seconds and
# peak RSS for:
#   cat          the floor: reading the file (page cache warm after run 1)
#   vramguard    vramguard snapshot FILE --json (decode and summary)
#   memory_viz   Debian's torch: pickle.load, then torch.cuda._memory_viz's
#                stats() over its segments (torch 1.13's `_memory_viz stats`
#                takes the bare list of 1.13, so its function is called on
#                the dict's "segments": the same work, pickle.load dominating)
#   view         GET /api/v1/snapshot of `vramguard snapshot FILE --serve`:
#                the server-side downsampled view the page draws (seconds,
#                and the payload's size)
# and the load average first: on a shared machine a figure means little
# without it. Needs go, /usr/bin/python3 with torch (python3-torch), curl.
set -euo pipefail
cd "$(dirname "$0")/../.."
MB=${MB:-100}
RUNS=${RUNS:-3}
WORK=${WORK:-/tmp/vramguard-snapshot-bench}
mkdir -p "$WORK"
snap=$WORK/large-$MB.pickle
if [ ! -s "$snap" ]; then
	/usr/bin/python3 scripts/gen-snapshot-fixtures.py --large "$snap" "$MB"
fi
go build -o "$WORK/vramguard" ./cmd/vramguard
vg=$WORK/vramguard
echo "file: $snap ($(du -m "$snap" | cut -f1) MiB)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
measure() { # label cmd...
	local label=$1
	shift
	/usr/bin/time -f "$label: %e s wall, %U s user, %S s sys, %M KiB peak RSS" "$@" >/dev/null
}
for i in $(seq "$RUNS"); do
	echo "run $i (load $(cut -d' ' -f1 /proc/loadavg))"
	measure cat cat "$snap"
	measure vramguard "$vg" snapshot "$snap" --json
	measure memory_viz /usr/bin/python3 -c '
import pickle, sys
from torch.cuda import _memory_viz
with open(sys.argv[1], "rb") as f:
    s = pickle.load(f)
_memory_viz.stats(s["segments"] if isinstance(s, dict) else s)
' "$snap"
done

# the view: serve, then time the page's data request
out=$WORK/serve.out
"$vg" snapshot "$snap" --serve >"$out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do
	grep -q '^http://' "$out" && break
	sleep 0.1
done
url=$(grep -o '^http://[^ ]*' "$out")
curl -s -o /dev/null -w "page: %{time_total} s, %{size_download} bytes\n" "$url"
for i in $(seq "$RUNS"); do
	curl -s -o /dev/null -w "view: %{time_total} s, %{size_download} bytes\n" "${url}api/v1/snapshot?device=0"
done
kill $pid
