package analyze

import (
	"math"
	"math/rand/v2"
)

const (
	mib = 1 << 20
	gib = 1 << 30
	ctx = 520 * mib // CUDA context: NVML's used minus reserved
)

// scenario is a training job's memory, in the manner of
// bench/traces/gen_traces.py: weights and optimizer state (base), an
// activation sawtooth per step sampled at random phases (act), and the
// behaviours that move it.
type scenario struct {
	seed      uint64
	dur, dt   float64 // seconds; samples every dt, jittered ±20-25%
	total     float64 // device memory
	base, act float64
	probe     bool // allocated and reserved recorded (else NVML only)

	leak, leakAt float64 // tensors kept alive: bytes/s from leakAt on
	epoch        float64 // ...in steps, once per epoch (leak is the average rate)
	evalEvery    float64 // evaluation phases of evalLen seconds with a quarter of the activations
	evalLen      float64
	varLen       bool    // heavy-tailed batch sizes
	warm, tau    float64 // allocated settling in: warm·(1-exp(-t/tau))
	frag         float64 // reserved creeping up alone, bytes/s
	accum        int     // gradient accumulation over accum micro-batches: .grad tensors (grads bytes) live from the first backward to zero_grad
	grads        float64
	step         float64 // seconds per micro-batch
}

func (sc scenario) samples() []Sample {
	rng := rand.New(rand.NewPCG(sc.seed, 7))
	if sc.total == 0 {
		sc.total = 40 * gib
	}
	if sc.step == 0 {
		sc.step = 0.5
	}
	var out []Sample
	reserved := 0.0
	seg := func(v float64) float64 { return math.Ceil(v/(20*mib)) * 20 * mib }
	for t := 0.0; t <= sc.dur; t += sc.dt * (0.8 + 0.45*rng.Float64()) {
		scale := sc.act
		if sc.evalEvery > 0 && t > sc.evalEvery && math.Mod(t, sc.evalEvery) < sc.evalLen {
			scale *= 0.25
		}
		if sc.varLen {
			scale *= math.Min(1.6, 0.55/math.Pow(1-rng.Float64(), 1.0/3))
		}
		phase := rng.Float64()
		tri := 2 * phase
		if phase >= 0.5 {
			tri = 2 * (1 - phase)
		}
		a := sc.base + scale*tri
		if sc.accum > 0 && !(int(t/sc.step)%sc.accum == 0 && phase < 0.5) {
			a += sc.grads
		}
		if sc.tau > 0 {
			a += sc.warm * (1 - math.Exp(-t/sc.tau))
		}
		if sc.leak > 0 && t >= sc.leakAt {
			if sc.epoch > 0 {
				a += sc.leak * sc.epoch * math.Floor((t-sc.leakAt)/sc.epoch)
			} else {
				a += sc.leak * (t - sc.leakAt)
			}
		}
		reserved = math.Max(reserved, seg(a*1.02))
		if sc.frag > 0 {
			reserved = math.Max(reserved, seg(sc.base+sc.act+sc.frag*t))
		}
		s := NaNSample(t)
		if sc.probe {
			s.Allocated, s.Reserved = a, reserved
		}
		s.Used, s.Total = reserved+ctx, sc.total
		out = append(out, s)
	}
	return out
}

// oomT is when the step peak (allocated at its highest, plus the context)
// would reach the device total: the labelled OOM of the shared traces.
func (sc scenario) oomT() float64 {
	if sc.total == 0 {
		sc.total = 40 * gib
	}
	act := sc.act
	if sc.varLen {
		act *= 1.6
	}
	room := sc.total - ctx - sc.base - act - sc.warm - sc.grads
	if sc.epoch > 0 {
		return sc.leakAt + (math.Floor(room/(sc.leak*sc.epoch))+1)*sc.epoch
	}
	return sc.leakAt + room/sc.leak
}

func run(cfg Config, samples []Sample) Report {
	d := NewDetector(cfg)
	for _, s := range samples {
		d.Add(s)
	}
	return d.Report()
}
