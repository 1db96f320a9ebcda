package analyze

import (
	"math"
)

// Series names a memory series of a timeline.
type Series string

// The series the detector follows.
const (
	SeriesAllocated Series = "allocated" // torch.cuda.memory_allocated(): live tensors
	SeriesReserved  Series = "reserved"  // torch.cuda.memory_reserved(): tensors + the allocator's cache
	SeriesUsed      Series = "used"      // NVML's per-process used memory: reserved + CUDA context
	SeriesRSS       Series = "rss"       // host resident set of the job's process tree
)

// Sample is one observation of a job's memory. Every field but T may be NaN
// when its source is absent (no probe: Allocated, Reserved, InactiveSplit and
// AllocRetries are NaN; no cgroup limit: Limit is NaN). Step is the training
// step counter when the probe knows it, else -1.
type Sample struct {
	T             float64 // seconds since the job started
	Allocated     float64 // bytes
	Reserved      float64 // bytes
	Used          float64 // bytes, NVML
	Total         float64 // device memory, bytes
	RSS           float64 // host resident bytes
	Limit         float64 // host memory limit (cgroup or physical), bytes
	InactiveSplit float64 // torch memory_stats inactive_split_bytes.all.current
	AllocRetries  float64 // torch memory_stats num_alloc_retries (cumulative)
	Step          int64
}

// NaNSample returns a Sample with every measurement absent, to fill in.
func NaNSample(t float64) Sample {
	n := math.NaN()
	return Sample{T: t, Allocated: n, Reserved: n, Used: n, Total: n, RSS: n, Limit: n,
		InactiveSplit: n, AllocRetries: n, Step: -1}
}

// Config tunes the detector. The zero value is not useful: start from
// DefaultConfig. docs/ANALYSIS.md explains each test.
type Config struct {
	// windows
	WindowS          float64 // tier-0 window length, seconds
	MinWindowSamples int     // a tier-0 window also needs this many samples
	Levels           int     // closed windows kept per tier (memory per series is Tiers*Levels)
	Tiers            int     // resolutions: tier k windows are TierFactor^k tier-0 windows long
	TierFactor       int
	WarmupS          float64 // windows starting this soon after a series' first sample are not judged

	// is the rise significant?
	MinLevels  int     // fewest windows a trend is judged on
	ZMin       float64 // Mann–Kendall Z the floors must reach...
	ZScreen    float64 // ...or at least this one, with a lower-envelope rise of EnvK/windows mean gaps
	EnvK       float64
	CeilZMin   float64 // the ceilings of a sawtooth must reach this Z when the floors pass on their own
	ZJoint     float64 // or floors and ceilings must both reach this Z (and HalfZJoint over the newer half)
	HalfZJoint float64

	// is it large and steady?
	MinRiseBytes  float64 // the fitted rise must exceed this many bytes...
	NoiseK        float64 // ...and NoiseK times the residual noise
	ConsistFrac   float64 // each third of the run must rise by this share of the fitted rise
	HalfZMin      float64 // the newer half of a run must reach this Mann–Kendall Z on its own...
	EnvHalfK      float64 // ...or a lower-envelope rise of EnvHalfK/windows mean gaps
	HalfFrac      float64 // at this share of the run's slope (and of the stretch before it) or more
	JumpFrac      float64 // NVML used with no probe: its two biggest jumps make less than this share of the rise
	RecordsBase   float64 // a series that holds its peak must rise from window to window at least
	RecordsPerLog float64 // RecordsBase + RecordsPerLog*ln(t1/t0) times (a stationary job sets ~ln(t1/t0) records)
	JobStartSpanS float64 // a rise with no flat stretch before it must span this long (warm-ups level off sooner)

	// does it persist?
	Persist  int     // consecutive window closes a tier's test must pass
	MinSpanS float64 // and the span of the run, seconds

	PeakS     float64 // the OOM forecast projects the step peaks of at least this many newest seconds
	HingeGain float64 // a rise's start is a bend only if it fits the floors this much better than a straight line

	// Runway is the fast forecast from a sustained rise (runway.go), which
	// speaks before the leak test can; BinS 0 turns it off.
	Runway RunwayConfig
}

// DefaultConfig is the configuration scored in docs/PERFORMANCE.md.
func DefaultConfig() Config {
	return Config{
		WindowS:          30,
		MinWindowSamples: 8,
		Levels:           32,
		Tiers:            6,
		TierFactor:       2,
		WarmupS:          60,

		MinLevels:  10,
		ZMin:       3,
		ZScreen:    2,
		EnvK:       60,
		CeilZMin:   1,
		ZJoint:     2.3,
		HalfZJoint: 1.0,

		MinRiseBytes:  32 << 20,
		NoiseK:        3,
		ConsistFrac:   0.3,
		HalfZMin:      1.65,
		EnvHalfK:      40,
		HalfFrac:      0.6,
		JumpFrac:      0.65,
		RecordsBase:   2,
		RecordsPerLog: 2,
		JobStartSpanS: 480,

		Persist:  2,
		MinSpanS: 120,

		PeakS:     240,
		HingeGain: 0.9,

		Runway: DefaultRunwayConfig(),
	}
}

// Verdict is the detector's judgement of a timeline.
type Verdict string

// Verdicts.
const (
	VerdictLeak             Verdict = "leak"              // memory keeps rising beyond what the job's shape explains
	VerdictCacheGrowth      Verdict = "cache_growth"      // reserved rises while allocated does not: cache or fragmentation
	VerdictStable           Verdict = "stable"            // no persistent rise
	VerdictInsufficientData Verdict = "insufficient_data" // too short to judge
)

// Report is what the detector concludes from the samples so far. Absent
// numbers are NaN (DetectedAtT, LeakRate, LeakStartT, OOMETA...).
type Report struct {
	Verdict Verdict
	// Series is the series the verdict rests on: allocated for a leak the probe
	// saw, used when only NVML watched (a leak and a growing cache then look
	// alike), rss for a host-side leak, reserved or used for cache growth.
	Series Series
	// Ambiguous is true when the rise could be tensors or allocator cache
	// (NVML only): the rise is real, its cause is not known.
	Ambiguous bool

	LeakRate        float64 // bytes/s of the rising floor
	LeakRatePerStep float64 // bytes per training step, when steps are known
	LeakStartT      float64 // when the rise began (change-point estimate)
	DetectedAtT     float64 // time of the sample at which the online detector first raised it

	// TrendRate is bytes/s of a floor that rises significantly without a
	// leak verdict (the rise the "trend" OOM forecast projects), and
	// TrendStartT when that rise began; NaN without such a forecast.
	TrendRate, TrendStartT float64

	// Runway is the fast forecast from a sustained rise of host memory (runway.go), nil when none stands: its own claim, with its own
	// evidence, whatever the verdict.
	Runway *Runway

	// OOM forecast, counted from the last sample: the time until the series'
	// peak meets its limit at the current trend, with a ~95% interval from the
	// slope's confidence interval. NaN when nothing is rising.
	OOMETA, OOMETALow, OOMETAHigh float64
	Limit                         float64 // the limit the forecast runs into, bytes

	Confidence float64 // 0..1, in the verdict
	Evidence   []string
	Advice     []string

	// HostLeak is set when host RSS rises steadily, whatever the GPU verdict.
	HostLeak *Report

	LastT   float64 // time of the last sample
	Samples int     // samples accepted
	Dropped int     // samples refused (time going backwards, or no time)
}

// Detector is the online leak detector and OOM forecaster for one job. Feed
// it samples in time order with Add; ask Report whenever a judgement is
// wanted. Work per sample is O(1) except when a window closes (every
// Config.WindowS seconds and MinWindowSamples samples at least), which costs
// O(Levels²); memory is fixed at construction (Tiers×Levels windows per
// series), whatever the length of the run. A Detector is not safe for
// concurrent use.
type Detector struct {
	cfg                        Config
	alloc, reserved, used, rss *track
	// corroborated: reserved rose steadily and the allocated step peaks rose
	// with it, so the growth is tensors, not cache, even where the allocated
	// floor is too noisy to show it on its own
	corroborated       bool
	corroboratedAt     float64
	n, dropped         int
	lastT              float64
	total, limit, ctx  float64
	split0, splitN     float64
	retries0, retriesN float64
	stepT0, stepTN     float64
	step0, stepN       int64
	// the runway forecast's bins of host memory; nil when off
	runRSS *binner
}

// NewDetector returns a detector with cfg (use DefaultConfig()).
func NewDetector(cfg Config) *Detector {
	if cfg.Levels < cfg.MinLevels {
		cfg.Levels = cfg.MinLevels
	}
	if cfg.Tiers < 1 {
		cfg.Tiers = 1
	}
	if cfg.TierFactor < 2 {
		cfg.TierFactor = 2
	}
	d := &Detector{cfg: cfg, lastT: math.Inf(-1)}
	c := &d.cfg
	d.alloc, d.reserved, d.used, d.rss = newTrack(c), newTrack(c), newTrack(c), newTrack(c)
	d.reserved.monotone, d.used.monotone = true, true
	d.alloc.sawtooth = true
	n := math.NaN()
	d.total, d.limit, d.ctx = n, n, n
	d.split0, d.splitN, d.retries0, d.retriesN = n, n, n, n
	d.step0, d.stepN = -1, -1
	if c.Runway.BinS > 0 && c.Runway.MaxBins >= 2*c.Runway.MinBins && c.Runway.MinBins >= 6 {
		d.runRSS = newBinner(&c.Runway)
	}
	return d
}

func ok(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// Add feeds one sample. A sample whose time is NaN or earlier than the
// previous one is dropped (counted in Report.Dropped); NaN, infinite or
// negative measurements are treated as absent. It reports whether a window
// or a runway bin closed, the only moments the report can change.
func (d *Detector) Add(s Sample) bool {
	if math.IsNaN(s.T) || s.T < d.lastT {
		d.dropped++
		return false
	}
	d.lastT = s.T
	d.n++
	closed := false
	if ok(s.Allocated) {
		closed = d.alloc.add(s.T, s.Allocated) || closed
	}
	if ok(s.Reserved) {
		closed = d.reserved.add(s.T, s.Reserved) || closed
	}
	if ok(s.Used) {
		d.used.alone = d.alloc.n == 0
		closed = d.used.add(s.T, s.Used) || closed
		if ok(s.Reserved) && s.Used >= s.Reserved {
			d.ctx = s.Used - s.Reserved
		}
	}
	if ok(s.RSS) {
		closed = d.rss.add(s.T, s.RSS) || closed
		if d.runRSS != nil {
			closed = d.runRSS.add(s.T, s.RSS) || closed
		}
	}
	if ok(s.Total) && s.Total > 0 {
		d.total = s.Total
	}
	if ok(s.Limit) && s.Limit > 0 {
		d.limit = s.Limit
	}
	if ok(s.InactiveSplit) {
		if math.IsNaN(d.split0) {
			d.split0 = s.InactiveSplit
		}
		d.splitN = s.InactiveSplit
	}
	if ok(s.AllocRetries) {
		if math.IsNaN(d.retries0) {
			d.retries0 = s.AllocRetries
		}
		d.retriesN = s.AllocRetries
	}
	if closed && !d.corroborated && !d.alloc.detected && d.reserved.detected && d.alloc.n > 0 {
		if d.peaksFollow(d.reserved.first) {
			d.corroborated, d.corroboratedAt = true, s.T
		}
	}
	if s.Step >= 0 {
		if d.step0 < 0 {
			d.step0, d.stepT0 = s.Step, s.T
		}
		d.stepN, d.stepTN = s.Step, s.T
	}
	return closed
}

// peaksFollow reports whether allocated rose with reserved over finding f
// of the reserved track: the envelopes of the allocated windows over f's run,
// the line under the floors and the line over the ceilings, must both climb
// at no less than half reserved's rate. Under a leak reserved follows the
// allocated peak (the allocator caches what the peak needed); a growing cache
// (fragmentation) or the running peak of a stationary job raises reserved
// alone. Envelopes, not medians: evaluation phases lower some ceilings and
// few-sample windows raise some floors, neither moves the envelope.
func (d *Detector) peaksFollow(f finding) bool {
	fo, ok := d.alloc.follows(f.segT0, d.lastT)
	return ok && fo.lo >= 0.5*f.tr.slope && fo.hi >= 0.5*f.tr.slope && fo.z >= 2 && fo.steady
}
