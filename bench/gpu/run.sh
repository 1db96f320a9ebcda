#!/usr/bin/env bash
# Side-by-side cost of one full GPU sample: vramguard's sampler (8 simulated
# GPUs, 200 GPU processes that are real `sleep`s, the live /proc, cgroups)
# against psutil doing the same reads (bench/gpu/psutil_sample.py says what
# each variant reads). The two alternate ROUNDS times in one run, so both see
# the same machine; each round prints both and their ratio, in wall-clock ms
# and in CPU ms per sample.
#
#   bench/gpu/run.sh            # N=200 ITERS=100 GO_ITERS=1000 ROUNDS=5
# (ITERS samples per psutil variant, GO_ITERS per Go benchmark: the Go
# samples are short, and more of them average out the garbage collector.)
# Needs: go, /usr/bin/python3 with python3-psutil (apt-get install python3-psutil).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-200}
ITERS=${ITERS:-100}
GO_ITERS=${GO_ITERS:-1000}
ROUNDS=${ROUNDS:-5}
[ "$N" = 200 ] || echo "note: the Go benchmark always uses 200 GPU processes" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/sampler.test" ./internal/sampler/
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), psutil $(/usr/bin/python3 -c 'import psutil; print(psutil.__version__)')"
for r in $(seq "$ROUNDS"); do
	echo "## round $r, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	(cd internal/sampler && "$tmp/sampler.test" -test.run '^$' -test.bench 'FullSample' \
		-test.benchtime "${GO_ITERS}x" -test.benchmem) | grep -E '^Benchmark' | tee "$tmp/go"
	/usr/bin/python3 bench/gpu/psutil_sample.py "$N" "$ITERS" | tee "$tmp/py"
	awk -v r="$r" '
		FILENAME ~ /go$/ && /gpu\+proc\+cgroups/ { m = "steady" }
		FILENAME ~ /go$/ && /FullSample\/cold/ { m = "cold" }
		FILENAME ~ /go$/ && m != "" {
			gw[m] = $3 / 1e6
			for (i = 4; i <= NF; i++) { if ($i == "cpu-ms/op") gc[m] = $(i-1); if ($i == "sys-ms/op") gs[m] = $(i-1) }
			m = ""
		}
		FILENAME ~ /py$/ && /^psutil\// { split($1, k, "/"); pw[k[2]] = $2; pc[k[2]] = $6; ps[k[2]] = $8 }
		END {
			for (m in gw)
				printf "round %s %-6s vramguard %6.2f ms (%5.2f cpu-ms, %5.2f sys)  psutil %6.2f ms (%6.2f cpu-ms, %6.2f sys)  psutil/vramguard %5.1fx wall, %5.1fx cpu\n",
					r, m, gw[m], gc[m], gs[m], pw[m], pc[m], ps[m], pw[m] / gw[m], pc[m] / gc[m]
		}' "$tmp/go" "$tmp/py" | sort -k3 -r | tee -a "$tmp/summary"
done
echo "## summary"
cat "$tmp/summary"
