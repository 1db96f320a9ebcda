#!/bin/sh
# CPU use of `vramguard serve` at 1 Hz with 8 simulated GPUs and 200
# processes, from /proc/<pid>/stat (utime+stime) over a window (default
# 60 s) after a warm-up, with a Prometheus-style scrape of /metrics and a
# dashboard-style poll of /api/v1/jobs every 15 s / 1 s (optional: POLL=0).
# Usage: bench/serve/cpu.sh [SECONDS]
set -eu
cd "$(dirname "$0")/../.."
WINDOW=${1:-60}
POLL=${POLL:-1}
BIN=$(mktemp -d)/vramguard
go build -o "$BIN" ./cmd/vramguard
HOME_DIR=$(mktemp -d)
PORT=19399
"$BIN" serve --home "$HOME_DIR" --simulate bench/serve/eight-gpus.json --listen 127.0.0.1:$PORT >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$HOME_DIR" "$(dirname "$BIN")"' EXIT
sleep 10
ticks() { awk '{print $14 + $15}' /proc/$PID/stat; }
HZ=$(getconf CLK_TCK)
T0=$(ticks); S0=$(date +%s.%N)
i=0
while [ $i -lt "$WINDOW" ]; do
  if [ "$POLL" = 1 ]; then
    curl -s -o /dev/null "http://127.0.0.1:$PORT/api/v1/jobs"
    [ $((i % 15)) -eq 0 ] && curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics"
  fi
  sleep 1; i=$((i + 1))
done
T1=$(ticks); S1=$(date +%s.%N)
JOBS=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^vramguard_jobs /{print $2}')
awk -v t0="$T0" -v t1="$T1" -v s0="$S0" -v s1="$S1" -v hz="$HZ" -v jobs="$JOBS" -v poll="$POLL" 'BEGIN {
  cpu = (t1 - t0) / hz; wall = s1 - s0;
  printf "serve CPU: %.2f s over %.1f s = %.2f%% of one core (%s jobs live, polling %s)\n", cpu, wall, 100 * cpu / wall, jobs, poll ? "on" : "off" }'
