// Package agent is the machine-wide daemon behind `vramguard serve`: it
// follows the one shared sampler (internal/sampler) and the probes that
// connect to its socket, keeps every job's memory timeline in the store
// (downsampled and bounded by a retention), judges each timeline with the
// online leak detector, raises alerts (log, webhook), and serves all of it
// over HTTP: a JSON API, Prometheus metrics and an embedded dashboard.
//
// It never polls the GPU itself, never signals a process unless an
// authenticated request asks it to, and never trusts a probe about a
// process other than the one on the other end of its connection.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/units"
)

// Config configures an Agent.
type Config struct {
	Sampler *sampler.Sampler
	Store   *store.Store
	// Probes delivers probe messages (probe.Listener.Messages()); nil: none.
	Probes <-chan probe.Message
	// Registry records what the probes said; it must be the sampler's
	// ProbeSource, so their allocator figures reach the jobs.
	Registry  *ProbeRegistry
	Retention Retention
	Alerts    AlertConfig
	// Simulated reports PIDs that a scenario made up (never signalled).
	Simulated func(pid int) bool
	Now       func() time.Time
	Log       *slog.Logger
	Version   string
	// Node is this machine's name on the rank series (serve --node; the
	// host name by default). NodeAliases are other names a process's
	// environment may give this machine (its short host name, when Node
	// was not chosen).
	Node        string
	NodeAliases []string
	// Admin reports whether a UID (not root, which always is) may see and
	// act on every user's jobs over the Unix socket (serve --admin-group).
	Admin func(uid int) bool
	// Idle is the policy for jobs that hold GPU memory without using it.
	Idle IdlePolicy
	// Reclaim shuts down the notebook kernel with the given id through
	// its Jupyter server (Idle.ReclaimAfter); nil: never.
	Reclaim func(ctx context.Context, kernelID string) error
	// KernelDirs are the Jupyter runtime directories whose servers GET
	// /api/v1/kernels asks (serve: jupyter.RuntimeDirs, every user's for
	// root); kernel processes no server lists are found without them.
	KernelDirs []string
}

// jobState is what the agent knows of one job.
type jobState struct {
	Job       attrib.Job
	ID        int64
	FirstSeen time.Time
	LastSeen  time.Time
	Limit     uint64 // total memory of the job's devices
	Labels    Labels
	LastCkpt  time.Time
	// Judged is the monitor's judgement of the job in the newest sample
	// (a supervised run's own monitor's, else the sampler's).
	Judged    *sampler.Judgement
	OOMs      int
	ProbeSeen bool
	ProbeBye  bool

	// rules applies the monitor's time rules (unsaved work) to a job the
	// agent hears the probe of; a supervised run applies its own.
	rules *monitor.Monitor
	// findings is the id of the newest finding of a supervised run that
	// the agent has raised as its own event
	findings int64
	// idle tracks how long the job has held GPU memory unused
	idle  idleTrack
	idleS float64
	// groups is the job's part in distributed jobs, as last recorded
	groups []groupPlace
}

// Labels are the job's Prometheus labels. Pod is the pod's name and
// Namespace its namespace (as kube-state-metrics labels them, so the two
// join), when the kubelet's pod log directory names them; else Pod is the
// pod's UID. PodUID is on job_info and in the API only.
type Labels struct {
	Job       string `json:"job"`
	Kind      string `json:"kind"`
	Container string `json:"container"`
	Pod       string `json:"pod"`
	Namespace string `json:"namespace"`
	Notebook  string `json:"notebook"`
	PodUID    string `json:"pod_uid,omitempty"`
	// User and UID are the job's owner (its root process's): the name on
	// the user label, the number in the API only.
	User string `json:"user"`
	UID  int    `json:"uid"`
}

func labelsOf(j *attrib.Job) Labels {
	c := j.Context
	l := Labels{Job: j.Name, Kind: j.Kind, Container: shortID(c.ContainerID), Pod: c.PodUID, Namespace: c.Namespace, Notebook: j.Kernel, PodUID: c.PodUID,
		User: j.User, UID: j.UID}
	if c.PodName != "" {
		l.Pod = c.PodName
	}
	return l
}

func shortID(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Agent is the running daemon state.
type Agent struct {
	cfg    Config
	tl     *Timelines
	alerts *Alerts
	log    *slog.Logger
	start  time.Time

	// pendingJobEvents counts the events waiting for their job
	// (jobEventSoon)
	pendingJobEvents atomic.Int32

	mu        sync.RWMutex
	latest    sampler.Reading
	have      bool
	jobs      map[string]*jobState
	lastErr   error
	lastErrAt time.Time
	samples   uint64
	probeRej  uint64
	probeMsgs uint64
	lastTouch time.Time
	evSeq     int64
	evCh      chan struct{}
	// ranks are the ranks of distributed jobs in the newest sample
	ranks []RankView
	// snapshots holds the OOM snapshot a run's page last opened
	snapshots runSnapshots
	// users bounds the user label of the job series
	users userLabels
	// notices are lines for users (idle jobs), newest last
	notices   []Notice
	noticeSeq int64
	// keySecret keys the hash that stands for another user's job key over
	// the socket (opaqueKey); drawn once per agent
	keySecret []byte
	// runOwner is the UID whose runs Config.Store holds: the agent's own
	// user's (the store is in its state directory)
	runOwner int
}

// New returns an Agent; it does nothing until Run.
func New(cfg Config) (*Agent, error) {
	if cfg.Sampler == nil || cfg.Store == nil {
		return nil, fmt.Errorf("agent: sampler and store are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = NewProbeRegistry()
	}
	if cfg.Simulated == nil {
		cfg.Simulated = func(int) bool { return false }
	}
	a := &Agent{
		cfg:      cfg,
		tl:       NewTimelines(cfg.Store, cfg.Retention),
		log:      cfg.Log,
		start:    cfg.Now(),
		jobs:     map[string]*jobState{},
		evCh:     make(chan struct{}),
		runOwner: os.Geteuid(),
	}
	a.keySecret = make([]byte, 32)
	if _, err := rand.Read(a.keySecret); err != nil {
		return nil, fmt.Errorf("agent: key secret: %w", err)
	}
	a.alerts = NewAlerts(cfg.Alerts, cfg.Log, cfg.Now)
	return a, nil
}

// Timelines returns the agent's timeline store.
func (a *Agent) Timelines() *Timelines { return a.tl }

// Alerts returns the alert dispatcher.
func (a *Agent) Alerts() *Alerts { return a.alerts }

// Run follows the sampler and the probes until ctx ends, then stores what
// is buffered. The sampler itself must be run by the caller.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if a.cfg.Probes != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.followProbes(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.alerts.Run(ctx) }()
	a.prune(ctx)
	lastPrune := time.Now()
	var seq uint64
	for {
		s, err := a.cfg.Sampler.Next(ctx, seq)
		if err != nil {
			wg.Wait()
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return a.tl.Close(cctx)
		}
		seq = s.Seq
		if s.ProcessTime.Equal(s.Time) {
			a.Ingest(ctx, s)
		} else {
			a.mu.Lock()
			a.latest.Devices, a.latest.Time = s.Devices, s.Time
			a.mu.Unlock()
		}
		if time.Since(lastPrune) > 10*time.Minute {
			lastPrune = time.Now()
			a.prune(ctx)
		}
	}
}

func (a *Agent) prune(ctx context.Context) {
	if err := a.tl.Prune(ctx, a.cfg.Now()); err != nil && ctx.Err() == nil {
		a.log.Warn("prune timelines", "err", err)
	}
}

// SamplerError records a failed poll (for /healthz and the success metric).
func (a *Agent) SamplerError(err error) {
	a.mu.Lock()
	a.lastErr, a.lastErrAt = err, a.cfg.Now()
	a.mu.Unlock()
	a.log.Warn("sample", "err", err)
}

// Ingest takes one full sample: updates jobs, timelines, detectors, and
// raises the events and alerts that follow. Run calls it for every sample;
// tests and benchmarks may call it directly.
func (a *Agent) Ingest(ctx context.Context, smp sampler.Reading) {
	now := smp.ProcessTime
	totals := map[int]uint64{}
	for _, d := range smp.Devices {
		if _, ok := totals[d.Index]; !ok {
			totals[d.Index] = d.TotalBytes
		}
	}
	var evs []*store.AgentEvent
	var touch []int64
	rks := a.ranksOf(smp.Attrib.Jobs)
	a.mu.Lock()
	a.ranks = rks
	seen := make(map[string]bool, len(smp.Attrib.Jobs))
	for i := range smp.Attrib.Jobs {
		j := smp.Attrib.Jobs[i]
		seen[j.Key] = true
		js := a.jobs[j.Key]
		if js == nil {
			js = &jobState{FirstSeen: now, rules: monitor.New(monitor.Config{UnsavedAfter: a.cfg.Alerts.UnsavedAfter, NearLimit: -1}, now)}
			a.jobs[j.Key] = js
			evs = append(evs, a.jobEvent(&j, now, EventStart, fmt.Sprintf("%s %s started (pid %d)", j.Kind, j.Name, j.RootPID), nil))
		} else if j.RootPID != js.Job.RootPID && j.Kind == attrib.KindRun {
			evs = append(evs, a.jobEvent(&j, now, EventRestart, fmt.Sprintf("run %s restarted (pid %d -> %d)", j.Name, js.Job.RootPID, j.RootPID), nil))
			js.rules = monitor.New(monitor.Config{UnsavedAfter: a.cfg.Alerts.UnsavedAfter, NearLimit: -1}, now)
			js.FirstSeen = now
		}
		var limit uint64
		for _, d := range j.Devices {
			limit += totals[d]
		}
		js.Job, js.LastSeen, js.Limit, js.Labels = j, now, limit, labelsOf(&j)
		groups := a.groupPlaces(&j)
		if js.ID == 0 || !sameGroupPlaces(groups, js.groups) {
			// recorded again when its ranks are first read (report --group)
			js.groups = groups
			info, _ := json.Marshal(map[string]any{"labels": js.Labels, "devices": j.Devices, "limit_bytes": limit, "root_pid": j.RootPID, "groups": groups})
			id, err := a.cfg.Store.UpsertAgentJob(ctx, &store.AgentJob{Key: j.Key, Kind: j.Kind, Name: j.Name, Info: info, FirstSeen: js.FirstSeen, LastSeen: now})
			if err != nil {
				a.log.Warn("record job", "job", j.Key, "err", err)
			}
			js.ID = id
		} else {
			touch = append(touch, js.ID)
		}
		p := Point{T: now.UnixMilli(), GPU: int64(j.GPUBytes), RSS: int64(j.RSSBytes), Alloc: -1, Reserved: -1, Util: int64(j.SMUtilPercent), GPUs: devicePoints(&j)}
		if j.AllocatedBytes != nil {
			p.Alloc = int64(*j.AllocatedBytes)
		}
		if j.ReservedBytes != nil {
			p.Reserved = int64(*j.ReservedBytes)
		}
		if js.ID != 0 {
			a.tl.Add(js.ID, p)
		}
		evs = append(evs, a.judge(js, &smp, now)...)
		if e := a.observeIdle(js, now); e != nil {
			evs = append(evs, e)
		}
		for _, pr := range j.Processes {
			if st, ok := a.cfg.Registry.probe(pr.PID); ok {
				js.ProbeSeen = true
				if st.ckpt.After(js.LastCkpt) {
					js.LastCkpt = st.ckpt
				}
			}
		}
		if j.RunID == "" && js.ProbeSeen {
			for _, e := range js.rules.Check(now, 0) {
				evs = append(evs, a.jobEventRaw(&js.Job, now, e.Kind, js.Job.Name+": "+e.Message, e.Data))
			}
		}
	}
	for key, js := range a.jobs {
		if seen[key] {
			continue
		}
		evs = append(evs, a.ended(ctx, js, now))
		if js.ID != 0 {
			a.tl.End(js.ID)
			if err := a.cfg.Store.EndAgentJob(ctx, js.ID, now); err != nil {
				a.log.Warn("record job end", "job", key, "err", err)
			}
		}
		delete(a.jobs, key)
	}
	a.latest, a.have = smp, true
	a.samples++
	doTouch := now.Sub(a.lastTouch) >= time.Minute
	if doTouch {
		a.lastTouch = now
	}
	a.mu.Unlock()

	if doTouch {
		if err := a.cfg.Store.TouchAgentJobs(ctx, touch, now); err != nil {
			a.log.Warn("record jobs", "err", err)
		}
	}
	if err := a.tl.Flush(ctx); err != nil && ctx.Err() == nil {
		a.log.Warn("store timelines", "err", err)
	}
	a.emit(ctx, evs)
}

// judge takes the job's judgement from the sample and returns the events
// to raise: what the sampler's monitor raised for a job vramguard run does
// not supervise, and a supervised run's own findings that the agent has not
// raised yet (so its alerts reach the agent's log and webhooks too).
// a.mu is held.
func (a *Agent) judge(js *jobState, smp *sampler.Reading, now time.Time) []*store.AgentEvent {
	j := &js.Job
	jd := smp.Judged[j.Key]
	js.Judged = jd
	if jd == nil {
		return nil
	}
	var evs []*store.AgentEvent
	if jd.Own {
		for _, e := range jd.Events {
			evs = append(evs, a.jobEventRaw(j, now, e.Kind, j.Name+": "+e.Message, e.Data))
		}
		return evs
	}
	for _, r := range smp.Runs {
		if r.ID != j.RunID {
			continue
		}
		for _, f := range r.Findings {
			if f.ID > js.findings {
				js.findings = f.ID
				evs = append(evs, a.jobEventRaw(j, f.T, f.Kind, j.Name+": "+f.Message, f.Data))
			}
		}
	}
	return evs
}

// ended says how a job that left the GPU ended. a.mu is held.
func (a *Agent) ended(ctx context.Context, js *jobState, now time.Time) *store.AgentEvent {
	j := &js.Job
	var why []string
	if js.OOMs > 0 {
		why = append(why, "after "+units.Plural(int(js.OOMs), "CUDA out-of-memory error"))
	}
	if js.ProbeSeen && !js.ProbeBye {
		why = append(why, "without its probe saying goodbye")
	}
	if j.RunID != "" {
		if r, err := a.cfg.Store.Resolve(ctx, j.RunID); err == nil && r.Status != store.StatusRunning {
			if r.ExitCode != nil && *r.ExitCode != 0 {
				why = append(why, fmt.Sprintf("run %s ended %s (exit %d)", r.ID, r.Reason, *r.ExitCode))
			}
		}
	}
	dur := now.Sub(js.FirstSeen).Round(time.Second)
	if len(why) > 0 {
		return a.jobEvent(j, now, EventDied, fmt.Sprintf("%s %s died %s, after %s", j.Kind, j.Name, strings.Join(why, "; "), dur), nil)
	}
	return a.jobEvent(j, now, EventExit, fmt.Sprintf("%s %s left the GPU after %s", j.Kind, j.Name, dur), nil)
}
