#!/usr/bin/env bash
# bench/all.sh: every benchmark docs/PERFORMANCE.md keeps, one after the
# other, each in its quick configuration (about 10 minutes on the 2-core VM
# when nothing else runs), with the baseline each one measures beside it.
# Before each area it prints the load average, since on a shared machine a
# figure means little without it; then the figures the page's tables take,
# each line labelled "[area] what: figure". Every benchmark's own output is
# kept in LOGDIR (printed at the end) for the rows the summary leaves out.
#
#   bench/all.sh              # all areas
#   bench/all.sh gpu serve    # only these areas
#   SMOKE=1 bench/all.sh      # tiny sizes: checks that every step runs, measures nothing
#
# Areas: output leak gpu pss probe ckpt snapshot doctor serve diagnose. The test suite's
# wall time is bench/suite/time.sh, run on its own (several minutes per run).
# Needs: go, /usr/bin/python3 with torch and psutil (python3-torch,
# python3-psutil), chromium and chromium-driver for the dashboard, git
# history back to bfe858c for the previous leak detector (skipped without).
# A step that fails is reported and the others still run; the exit status
# is 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
SMOKE=${SMOKE:-0}
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/vramguard-bench.XXXXXX)}
mkdir -p "$LOGDIR"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
areas=${*:-output leak gpu pss probe ckpt snapshot doctor serve diagnose}
failed=()

# quick configurations, and the tiny ones of a smoke run
if [ "$SMOKE" = 1 ]; then
	OUT_MB=10 OUT_REPS=1
	DET_TIME=2000x DET_COUNT=1
	TRACES_PER_FAMILY=1
	GPU_ENV="ROUNDS=1 ITERS=5 GO_ITERS=20"
	PROBE_ARGS="-runs 1 -steps 20 -pairs 2 -agent=false"
	CKPT_RUNS=("--mib 8 --count 2")
	DOCTOR_N=1
	SERVE_WINDOW=3 DASH_RUNS=1 INGEST_N=10x
	DIAG_N=1 NOTEBOOK_CELLS=50
	SNAP_ENV="MB=2 RUNS=1"
	PSS_GIBS="1" PSS_SECS=3
else
	OUT_MB=300 OUT_REPS=5
	DET_TIME=2s DET_COUNT=3
	TRACES_PER_FAMILY=8
	GPU_ENV="ROUNDS=3"
	PROBE_ARGS="-runs 5 -steps 300 -pairs 10 -agent=false"
	CKPT_RUNS=("--mib 1024 --count 3" "--mib 128 --count 8")
	DOCTOR_N=5
	SERVE_WINDOW=30 DASH_RUNS=2 INGEST_N=300x
	DIAG_N=10 NOTEBOOK_CELLS=1000
	SNAP_ENV="MB=100 RUNS=2"
	PSS_GIBS="2 8 16" PSS_SECS=30
fi

# The leak detector the page compares with ("previous"): the last one
# before the current design. Its package uses nothing but the standard
# library, so it builds beside today's benchmark and scenarios.
OLD_DETECTOR=bfe858c

header() {
	echo
	echo "== $1  $(date -u +%Y-%m-%dT%H:%MZ)  load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
}

# step AREA NAME CMD...: runs CMD with its output in LOGDIR/AREA-NAME.log;
# says so and remembers it when it fails.
step() {
	local area=$1 name=$2 log="$LOGDIR/$1-$2.log"
	shift 2
	"$@" >"$log" 2>&1
	local rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "[$area] $name: FAILED (exit $rc), see $log"
		tail -n 5 "$log" | sed 's/^/    /'
		failed+=("$area/$name")
		return 1
	fi
}

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

area_output() {
	header "output: vramguard run against tee (bench/run/throughput.sh $OUT_MB $OUT_REPS)"
	step output throughput bench/run/throughput.sh "$OUT_MB" "$OUT_REPS" || return
	grep -E '^(first vramguard|way |sh > file|sh \| tee|vramguard run|vramguard log)' "$LOGDIR/output-throughput.log" | sed 's/^/[output] /'
}

# detector_bench WHO DIR: ns per sample and samples/s of
# BenchmarkDetectorAdd in the tree at DIR, medians of DET_COUNT runs
detector_bench() {
	local who=$1 dir=$2 log="$LOGDIR/leak-bench-$1.log"
	(cd "$dir" && go test -run '^$' -bench DetectorAdd -benchtime "$DET_TIME" -count "$DET_COUNT" ./internal/analyze/) >"$log" 2>&1 ||
		{ echo "[leak] detector cost, $who: FAILED, see $log"; failed+=("leak/bench-$who"); return 1; }
	for c in steady leak steady-nvml; do
		awk -v c="$c" '$1 ~ "^BenchmarkDetectorAdd/" c "-[0-9]+$" {print $3}' "$log" | median | {
			read -r ns
			echo "$c $ns" >>"$work/detector-$who"
			printf '[leak] detector cost, %s, %s: %s ns/sample, %.1f M samples/s (median of %s)\n' \
				"$who" "$c" "$ns" "$(awk -v n="$ns" 'BEGIN {print 1000 / n}')" "$DET_COUNT"
		}
	done
	grep -q ' 0 allocs/op' "$log" && ! grep -E 'allocs/op' "$log" | grep -vq ' 0 allocs/op' &&
		echo "[leak] detector cost, $who: 0 allocations per sample"
	return 0
}

area_leak() {
	header "leak: detector cost and scores, this detector and $OLD_DETECTOR"
	local old="$work/old-detector"
	if git cat-file -e "$OLD_DETECTOR^{commit}" 2>/dev/null; then
		# the previous detector's package with today's benchmark and its
		# scenarios, so both run the same input
		mkdir -p "$old"
		git archive "$OLD_DETECTOR" | tar -x -C "$old"
		rm -f "$old"/internal/analyze/*_test.go
		cp internal/analyze/scenario_test.go "$old/internal/analyze/"
		{
			printf 'package analyze\n\nimport "testing"\n\n'
			awk '/^func BenchmarkDetectorAdd/ {p = 1} p {print} p && /^}/ {exit}' internal/analyze/detector_test.go
		} >"$old/internal/analyze/bench_test.go"
		step leak build-old sh -c "cd '$old' && go build -o '$work/vramguard-old' ./cmd/vramguard" || old=""
	else
		echo "[leak] $OLD_DETECTOR is not in this clone's history: previous detector skipped"
		old=""
	fi
	detector_bench this "$root"
	if [ -n "$old" ] && detector_bench previous "$old"; then
		awk 'NR == FNR {this[$1] = $2; next} $1 in this && this[$1] > 0 {printf "[leak] detector cost, %s: previous / this %.1fx\n", $1, $2 / this[$1]}' \
			"$work/detector-this" "$work/detector-previous"
	fi

	# The acceptance set of TestAcceptance: seed 1 with the original six
	# families (the public traces) and seeds 101, 202, 303 with all ten.
	local sets=() s fam
	for s in 1 101 202 303; do
		fam=all
		[ "$s" = 1 ] && fam=original
		step leak "traces-$s" python3 bench/traces/gen_traces.py "$work/traces/$s" --seed "$s" \
			--per-family "$TRACES_PER_FAMILY" --families "$fam" || return
		sets+=(--score "$work/traces/$s")
	done
	# analyze --score exits 1 when an acceptance threshold is missed: its
	# table is the figure either way.
	"$work/vramguard" analyze "${sets[@]}" >"$LOGDIR/leak-score-this.log" 2>&1
	[ -n "$old" ] && "$work/vramguard-old" analyze "${sets[@]}" >"$LOGDIR/leak-score-previous.log" 2>&1
	for b in this previous; do
		[ -s "$LOGDIR/leak-score-$b.log" ] || continue
		if ! awk '$1 == "all"' "$LOGDIR/leak-score-$b.log" | grep -q .; then
			echo "[leak] scores, $b: FAILED, see $LOGDIR/leak-score-$b.log"
			failed+=("leak/score-$b")
			continue
		fi
		awk -v b="$b" '$1 == "family" {sub(/^ +/, ""); print "[leak] scores, " b ", columns: " $0}
			$1 == "all" {sub(/^ +/, ""); print "[leak] scores, " b ": " $0}' "$LOGDIR/leak-score-$b.log"
	done
	grep -h '^vramguard:' "$LOGDIR/leak-score-this.log" | sed 's/^/[leak] scores, this: /'
	# Leak time-to-forecast (e2e TestFastLeakForecast's figures) goes here
	# once its benchmark is in; the page holds a placeholder row for it.
}

area_gpu() {
	header "gpu: one full sample, vramguard's sampler against psutil ($GPU_ENV bench/gpu/run.sh)"
	step gpu run env $GPU_ENV bench/gpu/run.sh || return
	local log="$LOGDIR/gpu-run.log" m
	sed -n '/^## summary/,$p' "$log" | grep '^round' | sed 's/^/[gpu] /'
	for m in steady cold; do
		sed -n '/^## summary/,$p' "$log" | grep -E "^round [0-9]+ +$m " | sed -nE 's/.*vramguard +([0-9.]+) ms \( *([0-9.]+) cpu-ms.*psutil +([0-9.]+) ms \( *([0-9.]+) cpu-ms.*psutil\/vramguard +([0-9.]+)x wall, +([0-9.]+)x cpu/\1 \2 \3 \4 \5 \6/p' |
			sort -g -k5 | awk -v m="$m" '{vw[NR]=$1; vc[NR]=$2; pw[NR]=$3; pc[NR]=$4; rw[NR]=$5; rc[NR]=$6}
				END {if (!NR) exit
					printf "[gpu] %s over %d rounds: vramguard %.2f-%.2f ms (%.2f-%.2f CPU-ms), psutil %.2f-%.2f ms (%.2f-%.2f CPU-ms); psutil/vramguard %.1f-%.1fx wall, ", m, NR, mn(vw), mx(vw), mn(vc), mx(vc), mn(pw), mx(pw), mn(pc), mx(pc), rw[1], rw[NR]
					printf "%.1f-%.1fx CPU\n", mn(rc), mx(rc) }
				function mn(a, i, v) {v = a[1]; for (i in a) if (a[i] < v) v = a[i]; return v}
				function mx(a, i, v) {v = a[1]; for (i in a) if (a[i] > v) v = a[i]; return v}'
	done
	grep -E '^(psutil|python)/' "$log" | awk '$1 == "psutil/steady" {r++} {print "[gpu] round " r ", " $0}'
}

area_pss() {
	header "pss: a job's PSS on a budget against psutil and a read a second (bench/sampler/rollup.sh GIB $PSS_SECS, GIB in $PSS_GIBS)"
	local g
	for g in $PSS_GIBS; do
		step pss "$g" bench/sampler/rollup.sh "$g" "$PSS_SECS" || continue
		grep -E '% of a core' "$LOGDIR/pss-$g.log" | sed "s/^/[pss] $g GiB: /"
	done
}

area_probe() {
	header "probe: a CPU training loop without and with the probe (bench/probe/run.sh $PROBE_ARGS)"
	# shellcheck disable=SC2086
	step probe run bench/probe/run.sh $PROBE_ARGS || return
	grep -E '^\|' "$LOGDIR/probe-run.log" | grep -vE '^\| ?---' | sed 's/^/[probe] /'
	header "probe: the notebook's cost per cell and %vramguard who over 1 M objects (bench/probe/notebook)"
	step probe notebook go run ./bench/probe/notebook -cells "$NOTEBOOK_CELLS" -objects 1000000 -rounds 3 || return
	grep -E '^\| notebook' "$LOGDIR/probe-notebook.log" | sed 's/^/[notebook] /'
}

area_ckpt() {
	local a i=0 rc
	for a in "${CKPT_RUNS[@]}"; do
		i=$((i + 1))
		header "ckpt: vramguard ckpt against torch.load and cat (bench/ckpt/run.sh DIR $a)"
		# bench.py takes the first argument after the binary that is not an
		# option as its directory, option values too: name one, or it
		# writes the checkpoints to ./1024 (the --mib value) and keeps them.
		# shellcheck disable=SC2086
		step ckpt "run-$i" bench/ckpt/run.sh "$work/ckpt-$i" $a
		rc=$?
		rm -rf "$work/ckpt-$i"
		[ "$rc" -eq 0 ] || continue
		grep -E '^(Checkpoints|\| (list|read|bytes))' "$LOGDIR/ckpt-run-$i.log" | sed "s/^/[ckpt $a] /"
	done
	header "ckpt: zip bombs, vramguard ckpt against torch.load (bench/ckpt/zipbomb.sh)"
	step ckpt zipbomb bench/ckpt/zipbomb.sh || return
	grep -E '^\|' "$LOGDIR/ckpt-zipbomb.log" | grep -vE '^\|(---| file)' | sed 's/^/[zipbomb] /'
	header "ckpt: cost bounds on hostile inputs, vramguard ckpt against the loaders (bench/ckpt/bounds.sh)"
	step ckpt bounds bench/ckpt/bounds.sh || return
	grep -E '^\|' "$LOGDIR/ckpt-bounds.log" | grep -vE '^\|(---| input)' | sed 's/^/[ckpt-bounds] /'
}

area_snapshot() {
	header "snapshot: vramguard snapshot against pickle.load + _memory_viz and cat (bench/snapshot/run.sh, $SNAP_ENV)"
	# shellcheck disable=SC2086
	step snapshot run env $SNAP_ENV bench/snapshot/run.sh || return
	sed 's/^/[snapshot] /' "$LOGDIR/snapshot-run.log"
}

area_doctor() {
	header "doctor: vramguard doctor against import torch (bench/doctor/run.sh $DOCTOR_N)"
	step doctor run bench/doctor/run.sh "$DOCTOR_N" || return
	sed 's/^/[doctor] /' "$LOGDIR/doctor-run.log"
	# CPU time, which moves less with load than wall time
	/usr/bin/time -f '%U %S' -o "$work/t1" /usr/bin/python3 -c 'import torch' >/dev/null 2>&1
	/usr/bin/time -f '%U %S' -o "$work/t2" "$work/vramguard" doctor >/dev/null 2>&1
	/usr/bin/time -f '%U %S' -o "$work/t3" "$work/vramguard" doctor --python /usr/bin/python3 --dir /tmp >/dev/null 2>&1
	printf '[doctor] user+sys CPU, one run: import torch %.2f s, doctor %.2f s, doctor --python /usr/bin/python3 %.2f s\n' \
		"$(awk 'END {print $1 + $2}' "$work/t1")" "$(awk 'END {print $1 + $2}' "$work/t2")" "$(awk 'END {print $1 + $2}' "$work/t3")"
}

# serve_cpu idle|polled: cpu.sh's line, and the share of a core per job
serve_cpu() {
	local log="$LOGDIR/serve-cpu-${1/polled/poll}.log"
	grep '^serve CPU' "$log" | sed "s/^/[serve] $1: /"
	sed -nE 's/.* = ([0-9.]+)% of one core \(([0-9]+) jobs live.*/\1 \2/p' "$log" |
		awk -v w="$1" '$2 > 0 {printf "[serve] %s: %.4f%% of one core per job\n", w, $1 / $2}'
}

area_serve() {
	header "serve: CPU of vramguard serve, idle (POLL=0 bench/serve/cpu.sh $SERVE_WINDOW)"
	step serve cpu-idle env POLL=0 bench/serve/cpu.sh "$SERVE_WINDOW" && serve_cpu idle
	header "serve: CPU with a dashboard polling every second (bench/serve/cpu.sh $SERVE_WINDOW)"
	step serve cpu-poll bench/serve/cpu.sh "$SERVE_WINDOW" && serve_cpu polled
	header "serve: per-tick cost (go test -bench SampleAndIngest -benchtime $INGEST_N ./internal/agent)"
	step serve ingest go test ./internal/agent -run '^$' -bench SampleAndIngest -benchtime "$INGEST_N" &&
		awk '/^BenchmarkSampleAndIngest/ {for (i = 2; i <= NF; i++) {if ($i ~ /^refresh-/) r = $(i-1); if ($i ~ /^ingest-/) g = $(i-1)}
			printf "[serve] per tick: refresh %.2f ms, ingest %.2f ms\n", r / 1000, g / 1000}' "$LOGDIR/serve-ingest.log"
	header "serve: disk for a day of 50 jobs (go test -run DayOfFifty ./internal/agent)"
	step serve disk go test ./internal/agent -run DayOfFifty -count=1 -v && grep -o '24 h x 50 jobs.*' "$LOGDIR/serve-disk.log" | sed 's/^/[serve] /'
	header "serve: dashboard 24 h view of 50 jobs in headless Chromium (bench/serve/dashboard.sh $DASH_RUNS)"
	step serve dashboard bench/serve/dashboard.sh "$DASH_RUNS" && grep -o '24 h view.*' "$LOGDIR/serve-dashboard.log" | sed 's/^/[serve] dashboard: /'
}

area_diagnose() {
	header "diagnose: failure classification against grep -E (bench/diagnose/run.sh $DIAG_N)"
	step diagnose run bench/diagnose/run.sh "$DIAG_N" || return
	grep -vE '^# (go test|grep)' "$LOGDIR/diagnose-run.log" | sed 's/^/[diagnose] /'
}

echo "# bench/all.sh $(git rev-parse --short HEAD 2>/dev/null) $(go version | cut -d' ' -f3) on $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB; logs in $LOGDIR$([ "$SMOKE" = 1 ] && echo '; SMOKE: tiny sizes, not figures')"
start=$(date +%s)
go build -o "$work/vramguard" ./cmd/vramguard || { echo "bench/all.sh: go build failed" >&2; exit 1; }
for a in $areas; do
	case $a in
	output | leak | gpu | pss | probe | ckpt | snapshot | doctor | serve | diagnose) "area_$a" ;;
	*) echo "bench/all.sh: unknown area $a (want: output leak gpu pss probe ckpt snapshot doctor serve diagnose)" >&2; exit 2 ;;
	esac
done
echo
echo "# done in $(($(date +%s) - start)) s; logs in $LOGDIR"
if [ ${#failed[@]} -gt 0 ]; then
	echo "# failed: ${failed[*]}"
	exit 1
fi
