// Package monitor is the one place where a job's timeline becomes
// conclusions: the leak verdict and OOM forecast (over PyTorch's allocator,
// NVML and host memory alike), unsaved work, a stall, closeness to the
// memory limit. `vramguard run` feeds it its job's samples, `vramguard
// serve` each unsupervised job's, and `analyze RUN` replays a stored
// timeline through it, so one job gets one verdict everywhere. A Monitor
// only computes: it never reads /proc, writes the store or prints; its
// events go to whichever sinks the caller has.
package monitor

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/analyze/runtrace"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// Config tunes a Monitor. The zero value takes the defaults.
type Config struct {
	// Detector and Alerter tune the leak detector and the per-episode
	// alerting (zero: analyze's defaults).
	Detector *analyze.Config
	// OOMWarning raises oom_forecast when the forecast falls below it
	// (default 10 minutes).
	OOMWarning time.Duration
	// UnsavedAfter raises unsaved_work when a job has trained this long
	// since its last checkpoint (or its start); 0: never.
	UnsavedAfter time.Duration
	// StallAfter raises stalled when the job has had no output, used no CPU
	// and made no training progress for this long; once a distributed job
	// (SetDistributed) made progress (Progress), CPU time no longer
	// counts: only progress and output do. 0: never.
	StallAfter time.Duration
	// NearLimit raises near_limit when the memory the limit is enforced on
	// reaches this share of it (default 0.9; negative: never).
	NearLimit float64
}

func (c Config) withDefaults() Config {
	if c.Detector == nil {
		d := analyze.DefaultConfig()
		c.Detector = &d
	}
	if c.OOMWarning <= 0 {
		c.OOMWarning = 10 * time.Minute
	}
	if c.NearLimit == 0 {
		c.NearLimit = 0.9
	}
	return c
}

// Finding is the monitor's leak or OOM conclusion as every view shows it.
// Times are absolute and, in the *_s fields, seconds since the attempt
// started (the scale `analyze` prints).
type Finding struct {
	Verdict string `json:"verdict"`
	// Series is what the verdict rests on: allocated, reserved, used (NVML)
	// or rss (host memory).
	Series     string    `json:"series"`
	Ambiguous  bool      `json:"ambiguous,omitempty"`
	LeakStart  time.Time `json:"leak_start"`
	LeakStartS float64   `json:"leak_start_s"`
	DetectedAt time.Time `json:"detected_at"`
	DetectedS  float64   `json:"detected_at_s"`
	// LeakRate is bytes per second of the rising floor.
	LeakRate float64 `json:"leak_rate_bytes_per_s"`
	// OOMETA is the forecast time to OOM, in seconds, when the finding was
	// made; OOMAt the moment it points to; Limit what it runs into.
	OOMETA     *float64   `json:"oom_eta_s"`
	OOMAt      *time.Time `json:"oom_at,omitempty"`
	Limit      *float64   `json:"limit_bytes,omitempty"`
	Confidence float64    `json:"confidence"`
	// Basis, for a forecast, is the claim it rests on: "leak" (the leak
	// verdict's projection), "trend" (a significant rise not called a leak)
	// or "runway" (a sustained rise near the limit, before any verdict).
	Basis    string   `json:"basis,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
	Message  string   `json:"message"`
}

// Summary is what a monitor concluded over an attempt: the first leak
// alert, the last OOM forecast alert, and the detector's current report.
type Summary struct {
	// Verdict is the current verdict (leak, stable, cache_growth, ...) and
	// Series what it rests on.
	Verdict string `json:"verdict"`
	Series  string `json:"series,omitempty"`
	// Leak is the first leak alert of the attempt (when the leak was first
	// seen and the forecast then), nil when none was raised.
	Leak *Finding `json:"leak"`
	// Forecast is the newest OOM forecast alert, nil when none was raised.
	Forecast *Finding `json:"oom_forecast"`
	// Samples is how many samples the monitor observed.
	Samples int `json:"samples"`
	// Report is the detector's current report in full.
	Report *analyze.Report `json:"-"`
}

// Monitor watches one attempt of one job. It is safe for concurrent use.
type Monitor struct {
	cfg   Config
	start time.Time

	mu       sync.Mutex
	det      *analyze.Detector
	al       *analyze.Alerter
	report   analyze.Report
	have     bool
	leak     *Finding
	forecast *Finding
	n        int // samples observed

	lastActivity  time.Time // output, CPU time or training progress
	progress      time.Time // training progress (optimizer steps, saves)
	lastCkpt      time.Time
	lastCPU       uint64
	haveCPU       bool
	unsavedWarned time.Time
	stalled       bool
	distributed   bool
	nearIn        bool
}

// New returns a Monitor for an attempt that started at start.
func New(cfg Config, start time.Time) *Monitor {
	cfg = cfg.withDefaults()
	return &Monitor{
		cfg:   cfg,
		start: start,
		det:   analyze.NewDetector(*cfg.Detector),
		al:    analyze.NewAlerter(analyze.AlerterConfig{OOMThresholdS: cfg.OOMWarning.Seconds()}),
		report: analyze.Report{Verdict: analyze.VerdictInsufficientData, LeakRate: math.NaN(), LeakStartT: math.NaN(), TrendRate: math.NaN(), TrendStartT: math.NaN(),
			DetectedAtT: math.NaN(), OOMETA: math.NaN(), OOMETALow: math.NaN(), OOMETAHigh: math.NaN(), Limit: math.NaN()},
		lastActivity: start,
	}
}

// Start is when the attempt started: time zero of the *_s figures.
func (m *Monitor) Start() time.Time { return m.start }

// SetDistributed says the job has two ranks or more (its processes name
// them): from its first training progress on, its CPU time no longer keeps
// it from counting as stalled.
func (m *Monitor) SetDistributed() {
	m.mu.Lock()
	m.distributed = true
	m.mu.Unlock()
}

// Observe takes the job's next sample (in time order) and returns the
// events it raises: leak and oom_forecast once per episode, near_limit once
// per episode.
func (m *Monitor) Observe(s *timeline.Sample) []timeline.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var evs []timeline.Event
	// CPU time is activity, except in a distributed job that has reported
	// training progress: from then on only progress and output are, as a
	// rank waiting in a collective for a rank that stopped uses CPU (NCCL
	// spins, the probe samples) without making any. A single process's
	// silent evaluation loop still counts as busy.
	if m.haveCPU && s.CPUTicks != m.lastCPU && s.T.After(m.lastActivity) && (m.progress.IsZero() || !m.distributed) {
		m.lastActivity = s.T
	}
	m.lastCPU, m.haveCPU = s.CPUTicks, true
	m.n++
	if m.det.Add(runtrace.Sample(s, m.start)) {
		m.report, m.have = m.det.Report(), true
		for _, al := range m.al.Observe(m.report) {
			kind := timeline.KindLeak
			var f *Finding
			if al.Kind == analyze.AlertOOM {
				kind = timeline.KindOOMForecast
				f = m.forecastFinding(al.Report, al.Message)
				m.forecast = f
			} else {
				f = m.finding(al.Report, al.Message)
				if m.leak == nil {
					m.leak = f
				}
			}
			data, _ := json.Marshal(f)
			evs = append(evs, timeline.Event{T: s.T, Attempt: s.Attempt, Kind: kind, Message: al.Message, Data: data})
		}
	}
	if e, ok := m.nearLimit(s); ok {
		evs = append(evs, e)
	}
	return evs
}

// nearLimit compares the figure the limit is enforced on: the job's own
// cgroup usage against its limit, else the tree's RSS against the limit in
// force. An episode ends once it falls back under 80% of the share.
func (m *Monitor) nearLimit(s *timeline.Sample) (timeline.Event, bool) {
	if m.cfg.NearLimit < 0 {
		return timeline.Event{}, false
	}
	used, limit, what := s.RSS, s.Limit, "resident memory of the job's processes"
	if s.CgroupLimit != nil && s.CgroupUsage != nil && *s.CgroupLimit > 0 {
		used, limit, what = *s.CgroupUsage, *s.CgroupLimit, "memory charged to the job's cgroup (page cache included)"
	}
	if limit == 0 {
		return timeline.Event{}, false
	}
	frac := float64(used) / float64(limit)
	switch {
	case !m.nearIn && frac >= m.cfg.NearLimit:
		m.nearIn = true
		msg := fmt.Sprintf("host memory at %.0f%% of its limit (%s): %s of %s, %s", 100*frac, s.LimitSource,
			units.FormatBytes(float64(used)), units.FormatBytes(float64(limit)), what)
		data, _ := json.Marshal(map[string]any{"used_bytes": used, "limit_bytes": limit, "limit_source": s.LimitSource, "fraction": frac})
		return timeline.Event{T: s.T, Attempt: s.Attempt, Kind: timeline.KindNearLimit, Message: msg, Data: data}, true
	case m.nearIn && frac < 0.8*m.cfg.NearLimit:
		m.nearIn = false
	}
	return timeline.Event{}, false
}

func (m *Monitor) at(t float64) time.Time {
	return m.start.Add(time.Duration(t * float64(time.Second))).Round(time.Millisecond)
}

// finding turns a report that raised an alert into a Finding. For an OOM
// alert raised by a host leak under a GPU verdict, the host leak's figures
// are the ones that matter.
func (m *Monitor) finding(r analyze.Report, msg string) *Finding {
	src := r
	if r.HostLeak != nil && (math.IsNaN(r.OOMETA) || r.HostLeak.OOMETA < r.OOMETA) {
		src = *r.HostLeak
	}
	f := &Finding{Verdict: string(r.Verdict), Series: string(src.Series), Ambiguous: src.Ambiguous,
		LeakRate: zeroNaN(src.LeakRate), Confidence: zeroNaN(src.Confidence), Evidence: src.Evidence, Message: msg}
	if !math.IsNaN(src.LeakStartT) {
		f.LeakStartS = round1(src.LeakStartT)
		f.LeakStart = m.at(src.LeakStartT)
	}
	if !math.IsNaN(src.DetectedAtT) {
		f.DetectedS = round1(src.DetectedAtT)
		f.DetectedAt = m.at(src.DetectedAtT)
	} else {
		f.DetectedS = round1(r.LastT)
		f.DetectedAt = m.at(r.LastT)
	}
	if !math.IsNaN(src.OOMETA) {
		v := round1(src.OOMETA)
		f.OOMETA = &v
		at := m.at(r.LastT + src.OOMETA)
		f.OOMAt = &at
	}
	if !math.IsNaN(src.Limit) {
		v := src.Limit
		f.Limit = &v
	}
	return f
}

// forecastFinding turns a report that raised an OOM alert into a Finding
// from its soonest forecast: a runway forecast carries the rise's rate, start
// and evidence, not a leak's.
func (m *Monitor) forecastFinding(r analyze.Report, msg string) *Finding {
	fc, ok := analyze.SoonestForecast(r)
	if !ok || fc.Basis != "runway" {
		f := m.finding(r, msg)
		if ok {
			f.Basis = fc.Basis
		}
		if ok && fc.Basis == "trend" {
			// no leak verdict: the rate and start are the trend's
			f.LeakRate = zeroNaN(fc.Rate)
			if !math.IsNaN(fc.StartT) {
				f.LeakStartS = round1(fc.StartT)
				f.LeakStart = m.at(fc.StartT)
			}
		}
		return f
	}
	w := r.Runway
	f := &Finding{Verdict: string(r.Verdict), Series: string(w.Series), LeakRate: w.Rate, Basis: fc.Basis,
		Confidence: round2(math.Min(0.99, 2*normalCDF(w.Z)-1)), Evidence: []string{w.Evidence}, Message: msg,
		LeakStartS: round1(w.SinceT), LeakStart: m.at(w.SinceT), DetectedS: round1(r.LastT), DetectedAt: m.at(r.LastT)}
	v := round1(w.ETA)
	f.OOMETA = &v
	at := m.at(r.LastT + w.ETA)
	f.OOMAt = &at
	lim := w.Limit
	f.Limit = &lim
	return f
}

func normalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// Output records that the job wrote output at t.
func (m *Monitor) Output(t time.Time) {
	m.mu.Lock()
	advance(&m.lastActivity, t)
	m.mu.Unlock()
}

// Progress records training progress (an optimizer step, a save) at t.
func (m *Monitor) Progress(t time.Time) {
	m.mu.Lock()
	advance(&m.progress, t)
	advance(&m.lastActivity, t)
	m.mu.Unlock()
}

// Checkpoint records a successful checkpoint save at t.
func (m *Monitor) Checkpoint(t time.Time) {
	m.mu.Lock()
	advance(&m.lastCkpt, t)
	m.mu.Unlock()
	m.Progress(t)
}

// advance moves the time at forward to t; an earlier t (a late report)
// leaves it.
func advance(at *time.Time, t time.Time) {
	if t.After(*at) {
		*at = t
	}
}

// Check applies the time-based rules at now: unsaved_work once per
// checkpoint (only when the job trained after it), stalled once.
func (m *Monitor) Check(now time.Time, attempt int) []timeline.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var evs []timeline.Event
	if after := m.cfg.UnsavedAfter; after > 0 {
		since := m.start
		if m.lastCkpt.After(since) {
			since = m.lastCkpt
		}
		if !m.progress.IsZero() && m.progress.After(since) && now.Sub(since) >= after && !m.unsavedWarned.Equal(since) {
			m.unsavedWarned = since
			msg := fmt.Sprintf("%s of training since the last checkpoint (--unsaved-warning %s): a crash now loses it all",
				now.Sub(since).Round(time.Second), after)
			if m.lastCkpt.IsZero() {
				msg = fmt.Sprintf("%s of training and no checkpoint yet (--unsaved-warning %s): a crash now loses it all",
					now.Sub(since).Round(time.Second), after)
			}
			data, _ := json.Marshal(map[string]any{"since": since, "seconds": now.Sub(since).Seconds()})
			evs = append(evs, timeline.Event{T: now, Attempt: attempt, Kind: timeline.KindUnsaved, Message: msg, Data: data})
		}
	}
	if after := m.cfg.StallAfter; after > 0 && !m.stalled {
		if idle := now.Sub(m.lastActivity); idle >= after {
			m.stalled = true
			msg := fmt.Sprintf("no output, no CPU time used by any of its processes and no training progress for %s (--stall-timeout %s)",
				idle.Round(time.Second), after)
			if !m.progress.IsZero() && m.distributed {
				msg = fmt.Sprintf("no training progress (optimizer steps, saves) and no output for %s (--stall-timeout %s); CPU time does not count once a distributed job has made progress",
					idle.Round(time.Second), after)
			}
			evs = append(evs, timeline.Event{T: now, Attempt: attempt, Kind: timeline.KindStalled, Message: msg})
		}
	}
	return evs
}

// Summary returns what the monitor has concluded so far.
func (m *Monitor) Summary() Summary {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.report
	s := Summary{Verdict: string(r.Verdict), Series: string(r.Series), Leak: m.leak, Forecast: m.forecast, Samples: m.n, Report: &r}
	if !m.have {
		s.Verdict = string(analyze.VerdictInsufficientData)
	}
	return s
}

// Replay runs a stored timeline (one attempt's samples, in time order)
// through a fresh Monitor, as the live one saw it, and returns its summary:
// `analyze RUN` and a live `run` agree by construction.
func Replay(cfg Config, start time.Time, samples []timeline.Sample) Summary {
	m := New(cfg, start)
	for i := range samples {
		m.Observe(&samples[i])
	}
	return m.Summary()
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// FromFindings rebuilds a run's summary from the events its supervisor
// recorded (timeline.RunState.Findings): the first leak, the newest
// forecast, and the verdict as the newest leak or verdict event left it.
// Views that do not supervise a run use it, so they show the run's own
// verdict.
func FromFindings(evs []timeline.Event) Summary {
	var s Summary
	for _, e := range evs {
		if e.Kind == timeline.KindVerdict {
			var v timeline.VerdictData
			if json.Unmarshal(e.Data, &v) == nil {
				s.Verdict, s.Series, s.Samples = v.Verdict, v.Series, v.Samples
			}
			continue
		}
		var f Finding
		if json.Unmarshal(e.Data, &f) != nil {
			continue
		}
		switch e.Kind {
		case timeline.KindLeak:
			if s.Leak == nil {
				s.Leak = &f
			}
			// the verdict is a leak until a later verdict event says otherwise
			s.Verdict, s.Series = f.Verdict, f.Series
		case timeline.KindOOMForecast:
			s.Forecast = &f
		}
	}
	return s
}

// Flags are the short labels `top` shows for a summary: "leak" while the
// verdict is a leak, "oom-risk" while the newest forecast's moment lies
// ahead of now.
func (s *Summary) Flags(now time.Time) []string {
	var out []string
	if s.Leak != nil && s.Verdict == string(analyze.VerdictLeak) {
		out = append(out, "leak")
	}
	if f := s.Forecast; f != nil && f.OOMAt != nil && f.OOMAt.After(now) {
		out = append(out, "oom-risk")
	}
	return out
}
