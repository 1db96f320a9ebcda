#!/bin/sh
# Starts grandchildren in new sessions (as daemons do) and writes their PIDs.
out=$1
setsid sleep 300 &
echo $! >> "$out"
setsid sh -c 'sleep 301 & echo $! >> '"$out"'; wait' &
echo $! >> "$out"
sleep 300 &
echo $! >> "$out"
echo ready
wait
