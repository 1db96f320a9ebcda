#!/usr/bin/env python3
"""How well can any forecaster meet "OOM ETA within +-25% of the labelled remaining time"?

For each labelled directory (gen_traces.py output) this counts the leaking traces, those that stop within two
sampling intervals of their labelled OOM (the generator ends a trace at the last sample before oom_t), and, for
the probe-watched ones among those, tries an oracle forecaster that is told the true leak rate: it removes the
leak from the allocated samples since the leak began, estimates the step peak with the Robson-Whitlock endpoint
estimator (2*x(n) - x(n-1)) or the uniform-range one (x(n) + range/n), and forecasts (total - context - peak)/rate
with the context read from the trace (used - reserved). It also counts the traces whose last NVML `used` exceeds
the device total, which a real device never reports.

Usage: eta_ceiling.py DIR [DIR...]       (no dependencies)
"""
import csv, json, os, statistics, sys


def main(dirs):
    leaking = near = nvml_near = oracle_hits = over_total = 0
    for d in dirs:
        labels = json.load(open(os.path.join(d, "labels.json")))
        for name, l in sorted(labels.items()):
            if not l["leak"] or l["oom_t"] is None:
                continue
            leaking += 1
            rows = list(csv.DictReader(open(os.path.join(d, name))))
            ts = [float(r["t"]) for r in rows]
            dt = statistics.median(b - a for a, b in zip(ts, ts[1:]))
            remaining = l["oom_t"] - ts[-1]
            last = rows[-1]
            if float(last["used"]) > float(last["total"]):
                over_total += 1
            if remaining > 2 * dt:
                continue
            near += 1
            if l["nvml_only"]:
                nvml_near += 1
                continue
            rate, t0 = l["leak_rate"], max(l["leak_start_t"], ts[-1] - 0.5 * (ts[-1] - l["leak_start_t"]))
            x = sorted(float(r["allocated"]) - rate * (float(r["t"]) - ts[-1]) for r in rows if float(r["t"]) >= t0)
            room = float(last["total"]) - (float(last["used"]) - float(last["reserved"]))
            best = 0
            for peak in (2 * x[-1] - x[-2], x[-1] + (x[-1] - x[0]) / len(x)):
                eta = (room - peak) / rate
                best = max(best, abs(eta - remaining) <= 0.25 * remaining)
            oracle_hits += best
    far = leaking - near
    print(f"leaking traces with a labelled OOM: {leaking}")
    print(f"stopping within 2 sampling intervals of their OOM: {near} ({nvml_near} NVML-only)")
    print(f"last NVML used above the device total: {over_total}")
    print(f"ceiling if every other trace were forecast within 25%: {far}/{leaking} = {far / leaking:.3f}")
    print(f"oracle with the true leak rate, probe-watched traces at their OOM: {oracle_hits}/{near - nvml_near} within 25%")
    print(f"ceiling with that oracle: {(far + oracle_hits)}/{leaking} = {(far + oracle_hits) / leaking:.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
