#!/usr/bin/env python3
"""Labelled GPU-memory traces of PyTorch training jobs, for the leak detector and the OOM forecaster.

Each trace is a CSV with the header  t,allocated,reserved,used,total
  t          seconds since the job started (samples need not be evenly spaced)
  allocated  torch.cuda.memory_allocated() in bytes   (empty when only NVML was watching)
  reserved   torch.cuda.memory_reserved() in bytes    (empty when only NVML was watching)
  used       the device memory NVML charges to the process, in bytes (reserved + CUDA context)
  total      the device's total memory in bytes
labels.json holds, per file: leak (bool), leak_start_t (or null), leak_rate (bytes/s of allocated, or null),
oom_t (when the job would run out of device memory if it kept going, or null), family, nvml_only, and
unbounded_growth (leak or fragmentation: what NVML alone can see).

The traces are models of what the caching allocator does (see the README beside this file), not recordings.
This copy (vramguard's bench/traces) adds four families after the original six: grad_accum, empty_cache,
warmup_plateau (no leak) and epoch_leak (a leak in steps); the original six come out unchanged for a seed.
Usage: gen_traces.py OUTDIR [--seed N] [--per-family K] [--families all|original|a,b,...]
"""
import argparse, json, math, os, random

GiB = 1 << 30
MiB = 1 << 20
CTX = 520 * MiB  # CUDA context + cuBLAS/cuDNN workspaces charged by NVML on top of reserved


def round_segment(n):
    # the allocator asks the driver for 2 MiB segments for small blocks and 20 MiB-rounded ones for large
    return (n + 20 * MiB - 1) // (20 * MiB) * (20 * MiB)


class Job:
    """A training job: weights + optimizer state, an activation sawtooth per step, optional eval phases."""

    def __init__(self, rng, total):
        self.rng = rng
        self.total = total
        self.weights = rng.uniform(0.03, 0.25) * total
        self.opt_state = self.weights * rng.choice([0, 1, 2])  # SGD, momentum, Adam
        self.act = rng.uniform(0.05, 0.35) * total  # activation peak per step
        self.step_s = rng.uniform(0.05, 1.5)
        self.eval_every = rng.choice([None, 120.0, 300.0])
        self.eval_len = rng.uniform(10, 40)
        self.var_len = False  # variable-length batches
        self.leak_rate = 0.0
        self.leak_start = None
        self.frag_rate = 0.0  # reserved-but-unallocated creep, bytes/s
        self.reserved = 0
        self.first_step_t = rng.uniform(2, 15)
        # behaviours of the families added after the original six; off unless a family sets them, and they
        # draw no random numbers when off, so the original families come out byte for byte as before
        self.accum = 0  # gradient accumulation: micro-batches per optimizer step (grads freed by zero_grad)
        self.empty_cache_every = None  # seconds between torch.cuda.empty_cache() calls
        self.ec_period = -1
        self.warm_extra = 0.0  # allocated that settles in over warm-up (autotuner workspaces, lazy buffers)
        self.warm_tau = None
        self.epoch_s = None  # a leak in steps: leak_step bytes kept at the end of every epoch
        self.leak_step = 0.0
        # a job that was launched at all fits: its steady peak leaves at least 8% of the device free
        peak = self.weights + self.opt_state + self.act * 1.6
        room = 0.92 * (total - CTX)
        if peak > room:
            k = room / peak
            self.weights *= k
            self.opt_state *= k
            self.act *= k

    def allocated(self, t):
        if t < self.first_step_t:
            return self.weights * min(1.0, t / self.first_step_t)
        base = self.weights + self.opt_state
        in_eval = self.eval_every and (t % self.eval_every) < self.eval_len and t > self.eval_every
        scale = self.act * (0.25 if in_eval else 1.0)
        if self.var_len:
            scale *= min(1.6, self.rng.paretovariate(3.0) * 0.55)
        phase = self.rng.random()  # where in the step the sample lands: forward builds up, backward frees
        a = base + scale * (phase * 2 if phase < 0.5 else (1 - phase) * 2)
        if self.accum:
            # .grad tensors (one per weight) live from the first micro-batch's backward until zero_grad
            # after the optimizer step, so the level between steps alternates
            micro = int((t - self.first_step_t) / self.step_s) % self.accum
            if not (micro == 0 and phase < 0.5):
                a += self.weights
        if self.warm_tau:
            a += self.warm_extra * (1 - math.exp(-(t - self.first_step_t) / self.warm_tau))
        if self.epoch_s:
            a += self.leak_step * max(0, int((t - self.first_step_t) / self.epoch_s))
        elif self.leak_start is not None and t >= self.leak_start:
            a += self.leak_rate * (t - self.leak_start)
        return a

    def sample(self, t):
        a = self.allocated(t)
        if self.empty_cache_every and t > self.first_step_t:
            k = int(t / self.empty_cache_every)
            if k != self.ec_period:
                # empty_cache() hands every unoccupied cached segment back to the driver
                self.ec_period = k
                self.reserved = round_segment(int(a * 1.02))
        need = round_segment(int(a * 1.02))
        if need > self.reserved:
            self.reserved = need
        if self.frag_rate and t > self.first_step_t:
            self.reserved = max(self.reserved, round_segment(int(self.weights + self.opt_state + self.act + self.frag_rate * t)))
        r = self.reserved
        return int(a), int(r), int(r + CTX)


def times(rng, dur):
    dt = rng.choice([0.5, 1.0, 2.0, 5.0])
    t, out = 0.0, []
    while t <= dur:
        out.append(round(t, 3))
        t += dt * rng.uniform(0.8, 1.25)  # jittered sampling
    return out


def oom_time(job, dur):
    # first t at which the allocated peak would need more than the device has left (weights+opt+act+leak+ctx)
    peak = job.weights + job.opt_state + job.act * (1.6 if job.var_len else 1.0)
    room = job.total - CTX - peak
    if job.accum:
        room -= job.weights
    if job.warm_tau:
        room -= job.warm_extra
    if job.epoch_s and job.leak_step > 0:
        # the first epoch boundary after which the kept tensors leave no room for a step's peak
        return job.first_step_t + (int(room / job.leak_step) + 1) * job.epoch_s
    if job.leak_rate > 0:
        return job.leak_start + room / job.leak_rate
    if job.frag_rate > 0:
        return room / job.frag_rate
    return None


FAMILIES = {}


def family(f):
    FAMILIES[f.__name__] = f
    return f


@family
def steady(job, rng):
    pass


@family
def eval_phases(job, rng):
    job.eval_every = rng.choice([60.0, 90.0, 150.0])


@family
def variable_length(job, rng):
    job.var_len = True


@family
def linear_leak(job, rng):
    job.leak_start = job.first_step_t
    job.leak_rate = rng.uniform(0.2, 8.0) * MiB


@family
def late_leak(job, rng):
    job.leak_start = rng.uniform(200, 900)
    job.leak_rate = rng.uniform(0.5, 10.0) * MiB


@family
def fragmentation(job, rng):
    job.frag_rate = rng.uniform(1, 6) * MiB


# Families added for vramguard's detector; they come after the original six so that, for a given seed,
# the original families' traces are unchanged (the random stream is consumed in the same order).

@family
def grad_accum(job, rng):
    # gradient accumulation over K micro-batches with zero_grad(set_to_none=True): the .grad tensors
    # (as large as the weights) come and go once per optimizer step, so the floor alternates; no leak
    job.accum = rng.choice([2, 4, 8, 16])
    fit(job, job.weights)


@family
def empty_cache(job, rng):
    # torch.cuda.empty_cache() every few minutes (or after each evaluation): reserved and NVML's number
    # fall back to what is allocated and climb again as the allocator re-caches; no leak
    job.empty_cache_every = rng.uniform(60, 600)
    job.eval_every = rng.choice([None, 120.0, 300.0])


@family
def warmup_plateau(job, rng):
    # allocated settles in over the first minutes (cuDNN/cuBLAS autotuner workspaces, lazily built buffers,
    # caches keyed by shape that stop growing once every shape has been seen), then stays flat; no leak
    job.warm_tau = rng.uniform(30, 240)
    job.warm_extra = rng.uniform(0.03, 0.15) * job.total
    fit(job, job.warm_extra)


@family
def epoch_leak(job, rng):
    # a leak in steps once per epoch (a list of per-epoch GPU tensors kept for logging, a history that
    # holds on to outputs): flat within an epoch, a step up at each epoch's end
    job.epoch_s = rng.uniform(60, 300)
    job.leak_rate = rng.uniform(0.3, 8.0) * MiB  # average over an epoch
    job.leak_step = job.leak_rate * job.epoch_s
    job.leak_start = job.first_step_t + job.epoch_s


def fit(job, extra):
    # keep the job launchable: shrink the extra so the steady peak still leaves 8% of the device free
    peak = job.weights + job.opt_state + job.act * 1.6
    room = 0.92 * (job.total - CTX) - peak
    if extra > room > 0:
        k = room / extra
        if job.accum:
            job.weights *= k  # the grads are as large as the weights
        else:
            job.warm_extra *= k


ORIGINAL = ["steady", "eval_phases", "variable_length", "linear_leak", "late_leak", "fragmentation"]


def make(rng, fam, nvml_only):
    total = rng.choice([16, 24, 40, 80, 141]) * GiB
    job = Job(rng, total)
    FAMILIES[fam](job, rng)
    dur = getattr(job, "duration", None) or rng.uniform(900, 3600)
    oom = oom_time(job, dur)
    if oom is not None and job.leak_rate and oom < job.leak_start + 300:
        # keep at least five minutes between the leak's start and the OOM it causes
        want = job.leak_start + rng.uniform(300, 3000)
        job.leak_rate *= (oom - job.leak_start) / (want - job.leak_start)
        job.leak_step = job.leak_rate * (job.epoch_s or 0)
        oom = oom_time(job, dur)
    rows = []
    for t in times(rng, dur):
        if oom is not None and t >= oom:
            break
        a, r, u = job.sample(t)
        rows.append((t, "" if nvml_only else a, "" if nvml_only else r, u, total))
    label = dict(family=fam, leak=job.leak_rate > 0, leak_start_t=job.leak_start,
                 leak_rate=job.leak_rate or None, oom_t=oom, nvml_only=nvml_only,
                 unbounded_growth=job.leak_rate > 0 or job.frag_rate > 0)
    return rows, label


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-family", type=int, default=8)
    ap.add_argument("--families", default="all",
                    help="'all' (default), 'original' (the six of ../shared/traces), or a comma-separated list")
    a = ap.parse_args()
    if a.families == "all":
        fams = list(FAMILIES)
    elif a.families == "original":
        fams = ORIGINAL
    else:
        fams = a.families.split(",")
        bad = [f for f in fams if f not in FAMILIES]
        if bad:
            ap.error(f"unknown families: {', '.join(bad)} (known: {', '.join(FAMILIES)})")
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    labels = {}
    for fam in fams:
        for k in range(a.per_family):
            nvml_only = k % 4 == 3
            rows, label = make(rng, fam, nvml_only)
            name = f"{fam}_{k:02d}.csv"
            with open(os.path.join(a.out, name), "w") as f:
                f.write("t,allocated,reserved,used,total\n")
                for r in rows:
                    f.write(",".join(str(x) for x in r) + "\n")
            labels[name] = label
    with open(os.path.join(a.out, "labels.json"), "w") as f:
        json.dump(labels, f, indent=1, sort_keys=True)
    print(f"{len(labels)} traces in {a.out}")


if __name__ == "__main__":
    main()
