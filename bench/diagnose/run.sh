#!/bin/sh
# Cost of vramguard's failure classifier (internal/diagnose) over a 1 MiB
# output tail and over the 200 lines the supervisor keeps, side by side with
# what a user would otherwise run on the same bytes: grep -E for the OOM line,
# and grep -E for every failure pattern the classifier knows by its message.
# The tail is the benchmark's own (four ranks' step logs, progress bars,
# NCCL info lines, and at the end one rank's CUDA OOM among the other ranks'
# watchdog timeouts), written out by the benchmark with -bench-tail-out.
#
#   bench/diagnose/run.sh [N]     (default N=10 runs of each; min / median / max)
set -eu
N=${1:-10}
cd "$(dirname "$0")/../.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
go test -c -o "$T/diagnose.test" ./internal/diagnose

echo "# go test -bench Classify (ns per classification; $N runs each)"
"$T/diagnose.test" -test.run '^$' -test.bench Classify -test.benchmem -test.count "$N" \
	-bench-tail-out "$T/tail.txt" | grep '^Benchmark' |
	awk '{ns[$1] = ns[$1] " " $3} END { for (k in ns) print k, ns[k] }' | sort |
	while read -r name runs; do
		echo $runs | tr ' ' '\n' | sort -n |
			awk -v n="$name" '{a[NR]=$1} END {printf "%-32s min %8.2f ms  median %8.2f ms  max %8.2f ms\n", n, a[1]/1e6, a[int((NR+1)/2)]/1e6, a[NR]/1e6}'
	done
printf '# the tail: %s bytes, %s lines\n' "$(wc -c <"$T/tail.txt")" "$(wc -l <"$T/tail.txt")"
tail -n 200 "$T/tail.txt" >"$T/tail200.txt"

OOM='CUDA out of memory|OutOfMemoryError'
ALL='CUDA out of memory|OutOfMemoryError|HIP out of memory|MPS backend out of memory|ALLOC_FAILED|NCCL error|Watchdog caught|ncclSystemError|illegal memory access|device-side assert|misaligned address|no kernel image|is not compatible with the current PyTorch|driver on your system is too old|PytorchStreamReader failed|invalid load key|Ran out of input|PytorchStreamWriter failed|No space left on device|StorageFull|Unexpected bus error|exited unexpectedly|is killed by signal|Cannot re-initialize CUDA|Traceback \(most recent call last\)'

# wall time of N runs of a command, in ms: min / median / max
timeit() {
	name=$1
	shift
	"$@" >/dev/null 2>&1 || true # warm-up
	ts=""
	i=0
	while [ $i -lt "$N" ]; do
		s=$(date +%s%N)
		"$@" >/dev/null 2>&1 || true
		e=$(date +%s%N)
		ts="$ts $(((e - s) / 1000))"
		i=$((i + 1))
	done
	echo $ts | tr ' ' '\n' | sort -n |
		awk -v n="$name" '{a[NR]=$1} END {printf "%-32s min %8.2f ms  median %8.2f ms  max %8.2f ms\n", n, a[1]/1e3, a[int((NR+1)/2)]/1e3, a[NR]/1e3}'
}
echo "# grep -E, the whole process (wall time; $N runs each)"
timeit "grep -E OOM, 1 MiB" grep -E "$OOM" "$T/tail.txt"
timeit "grep -E all patterns, 1 MiB" grep -E "$ALL" "$T/tail.txt"
timeit "grep -E all patterns, 200 lines" grep -E "$ALL" "$T/tail200.txt"
timeit "true (process start alone)" true
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
