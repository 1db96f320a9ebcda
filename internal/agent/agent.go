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
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
	"github.com/vramguard/vramguard/internal/units"
)

// Event kinds the agent raises: timeline's, under the names the agent's
// code and tests use. timeline.Alert says which are alerts.
const (
	EventStart       = timeline.KindStart
	EventExit        = timeline.KindExit
	EventDied        = timeline.KindDied
	EventRestart     = timeline.KindRestart
	EventOOM         = timeline.KindOOM
	EventCheckpoint  = timeline.KindCheckpoint
	EventLeak        = timeline.KindLeak
	EventOOMForecast = timeline.KindOOMForecast
	EventUnsaved     = timeline.KindUnsaved
	EventNote        = timeline.KindNote
	EventCell        = timeline.KindCell
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

func (a *Agent) jobEvent(j *attrib.Job, t time.Time, kind, msg string, data map[string]any) *store.AgentEvent {
	var raw json.RawMessage
	if data != nil {
		raw, _ = json.Marshal(data)
	}
	return a.jobEventRaw(j, t, kind, msg, raw)
}

func (a *Agent) jobEventRaw(j *attrib.Job, t time.Time, kind, msg string, data json.RawMessage) *store.AgentEvent {
	return &store.AgentEvent{JobKey: j.Key, JobName: j.Name, T: t, Kind: kind, Message: msg, Data: data}
}

// AddEvent records an event (from the API or a test) and dispatches it.
func (a *Agent) AddEvent(ctx context.Context, e *store.AgentEvent) error {
	if e.T.IsZero() {
		e.T = a.cfg.Now()
	}
	if err := a.cfg.Store.AddAgentEvent(ctx, e); err != nil {
		return err
	}
	a.notify(e)
	return nil
}

func (a *Agent) emit(ctx context.Context, evs []*store.AgentEvent) {
	for _, e := range evs {
		if err := a.cfg.Store.AddAgentEvent(ctx, e); err != nil {
			a.log.Warn("record event", "kind", e.Kind, "err", err)
			continue
		}
		a.notify(e)
	}
}

func (a *Agent) notify(e *store.AgentEvent) {
	if timeline.Alert(e.Kind) {
		a.alerts.Raise(e)
	}
	a.mu.Lock()
	a.evSeq = max(a.evSeq, e.ID)
	close(a.evCh)
	a.evCh = make(chan struct{})
	a.mu.Unlock()
}

// WaitEvent returns when an event newer than id exists or ctx ends.
func (a *Agent) WaitEvent(ctx context.Context, id int64) {
	a.mu.RLock()
	if a.evSeq > id {
		a.mu.RUnlock()
		return
	}
	ch := a.evCh
	a.mu.RUnlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// followProbes reads probe messages. A message about another PID than the
// connection's peer is refused: a probe may report only about itself.
func (a *Agent) followProbes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-a.cfg.Probes:
			if !ok {
				return
			}
			a.probeMessage(ctx, m)
		}
	}
}

func (a *Agent) probeMessage(ctx context.Context, m probe.Message) {
	if m.Type == probe.TypeInvalid || (m.PID != 0 && m.PID != m.PeerPID) || m.PeerPID == 0 {
		a.mu.Lock()
		a.probeRej++
		a.mu.Unlock()
		a.log.Warn("probe message refused", "type", m.Type, "pid", m.PID, "peer_pid", m.PeerPID)
		return
	}
	a.mu.Lock()
	a.probeMsgs++
	a.mu.Unlock()
	pid := m.PeerPID
	now := a.cfg.Now()
	switch m.Type {
	case probe.TypeSample:
		var alloc, res int64
		for _, d := range m.CUDA {
			alloc += d.AllocatedBytes
			res += d.ReservedBytes
		}
		progressed := false
		a.cfg.Registry.update(pid, func(s *probeState) {
			s.alloc, s.reserved, s.has, s.t = uint64(alloc), uint64(res), len(m.CUDA) > 0, now
			if st := m.OptimizerSteps + m.UserSteps; st > s.steps {
				s.steps, progressed = st, true
			}
		})
		if progressed {
			a.withJobOf(pid, func(js *jobState) { js.rules.Progress(now) })
		}
	case probe.TypeHello, probe.TypeTorch:
		a.cfg.Registry.update(pid, func(s *probeState) { s.t = now })
	case probe.TypeBye:
		a.cfg.Registry.update(pid, func(s *probeState) { s.bye = true })
		a.withJobOf(pid, func(js *jobState) { js.ProbeBye = true })
	case probe.TypeDisconnect:
		a.cfg.Registry.forget(pid)
	case probe.TypeCkpt:
		if m.OK != nil && !*m.OK {
			return
		}
		a.cfg.Registry.update(pid, func(s *probeState) { s.ckpt = now })
		var e *store.AgentEvent
		a.withJobOf(pid, func(js *jobState) {
			js.LastCkpt = now
			js.rules.Checkpoint(now)
			msg := fmt.Sprintf("%s saved %s", js.Job.Name, m.Path)
			data := map[string]any{"path": m.Path, "pid": pid}
			if m.Bytes != nil {
				data["bytes"] = *m.Bytes
			}
			e = a.jobEvent(&js.Job, now, EventCheckpoint, msg, data)
		})
		if e != nil {
			a.emit(ctx, []*store.AgentEvent{e})
		}
	case probe.TypeCell:
		// A notebook kernel's cell ended: the dashboard marks its span on
		// the kernel's plot (data: timeline.CellData, start and end).
		a.jobEventSoon(ctx, pid, func(js *jobState) *store.AgentEvent {
			d := probe.CellData(m)
			raw, _ := json.Marshal(d)
			return a.jobEventRaw(&js.Job, now, EventCell, js.Job.Name+": "+probe.CellLine(d), raw)
		})
	case probe.TypeOOM:
		var e *store.AgentEvent
		a.withJobOf(pid, func(js *jobState) {
			js.OOMs++
			data := map[string]any{"pid": pid, "source": m.Source}
			if m.AllocBytes != nil {
				data["alloc_bytes"] = *m.AllocBytes
			}
			if m.Device != nil {
				data["device"] = *m.Device
			}
			e = a.jobEvent(&js.Job, now, EventOOM, fmt.Sprintf("%s: CUDA out of memory in pid %d", js.Job.Name, pid), data)
		})
		if e != nil {
			a.emit(ctx, []*store.AgentEvent{e})
		}
	}
}

// maxPendingJobEvents bounds the events waiting for their job (jobEventSoon):
// past it, an event of a process no job holds yet is dropped.
const maxPendingJobEvents = 64

// jobEventSoon emits the event ev makes of pid's job: at once when a job
// holds pid, else once the machine view's next refreshes find it, for up
// to 10 s (a kernel's probe reports its first cell before a refresh has
// seen its new process). At most maxPendingJobEvents wait at once.
func (a *Agent) jobEventSoon(ctx context.Context, pid int, ev func(*jobState) *store.AgentEvent) {
	try := func() bool {
		found := false
		var e *store.AgentEvent
		a.withJobOf(pid, func(js *jobState) { found, e = true, ev(js) })
		if e != nil {
			a.emit(ctx, []*store.AgentEvent{e})
		}
		return found
	}
	if try() {
		return
	}
	if a.pendingJobEvents.Add(1) > maxPendingJobEvents {
		a.pendingJobEvents.Add(-1)
		return
	}
	go func() {
		defer a.pendingJobEvents.Add(-1)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			if try() {
				return
			}
		}
	}()
}

// withJobOf calls fn with the job holding pid, if there is one.
func (a *Agent) withJobOf(pid int, fn func(*jobState)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, js := range a.jobs {
		// A supervised run's job pid is its root even where the job's
		// processes are not listed (no GPU backend lists them).
		if js.Job.RootPID == pid && pid > 0 {
			fn(js)
			return
		}
		for _, p := range js.Job.Processes {
			if p.PID == pid {
				fn(js)
				return
			}
		}
	}
}

// Snapshot is a consistent copy of the agent's live state.
type Snapshot struct {
	Time     time.Time
	Have     bool
	Backend  string
	Devices  []gpu.Device
	Dropped  gpu.DropCounts
	Took     time.Duration
	Jobs     []JobView
	Vanished uint64
	// VanishedGPUs is Vanished by GPU.
	VanishedGPUs []JobGPU
	Samples      uint64
	LastErr      error
	LastErrAt    time.Time
	ProbeRej     uint64
	ProbeMsgs    uint64
	Started      time.Time
	// Ranks are the ranks of distributed jobs on this node.
	Ranks []RankView
}

// JobView is one live job as the API shows it.
type JobView struct {
	Key     string `json:"key"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	RootPID int    `json:"root_pid"`
	// UID and User are the job's owner (its root process's).
	UID  int    `json:"uid"`
	User string `json:"user"`
	PIDs []int  `json:"pids"`
	// Processes are the job's processes; a distributed job's in rank
	// order (its launcher first, each rank's process before its workers).
	Processes []JobProcess `json:"processes"`
	RunID     string       `json:"run_id,omitempty"`
	Labels    Labels       `json:"labels"`
	Devices   []int        `json:"devices"`
	GPUBytes  uint64       `json:"gpu_bytes"`
	// GPUs is GPUBytes by GPU: what the driver reports for the job's
	// processes on each device.
	GPUs      []JobGPU   `json:"gpus"`
	RSSBytes  uint64     `json:"rss_bytes"`
	Alloc     *uint64    `json:"allocated_bytes,omitempty"`
	Reserved  *uint64    `json:"reserved_bytes,omitempty"`
	Limit     uint64     `json:"limit_bytes"`
	FirstSeen time.Time  `json:"first_seen"`
	LastCkpt  *time.Time `json:"last_checkpoint,omitempty"`
	CkptAgeS  *float64   `json:"seconds_since_checkpoint,omitempty"`
	Verdict   string     `json:"verdict,omitempty"`
	Leak      bool       `json:"leak"`
	// LeakStart is when the leak began, as the monitor first saw it.
	LeakStart *time.Time `json:"leak_start,omitempty"`
	// IdleS is how long the job has held GPU memory with its utilisation
	// under the idle threshold (0 while in use); Idle is set once that is
	// the idle window or longer.
	IdleS float64 `json:"idle_s"`
	Idle  bool    `json:"idle"`
	// OOMETA is the time left until the forecast OOM, counted down from
	// the newest forecast.
	OOMETA *float64 `json:"oom_eta_s,omitempty"`
	// Monitor is the monitor's summary of the job (a supervised run's own).
	Monitor *monitor.Summary `json:"monitor,omitempty"`
	// JudgingS is, while the verdict is insufficient_data, how many more
	// seconds of samples the leak detector needs before it can judge.
	JudgingS *float64   `json:"judging_s,omitempty"`
	Orphan   bool       `json:"orphan,omitempty"`
	Live     bool       `json:"live"`
	EndedAt  *time.Time `json:"ended_at,omitempty"`
	id       int64
}

// judgingLeft is how much longer the leak detector (with configuration
// cfg: the sampler's monitors use the default) needs samples every interval,
// having had n, before it can judge a job: cfg.MinLevels closed windows,
// each at least cfg.WindowS long and cfg.MinWindowSamples samples.
func judgingLeft(cfg analyze.Config, n int, interval time.Duration) time.Duration {
	if interval <= 0 {
		interval = time.Second
	}
	// a window of k samples spans (k-1) intervals; the next one starts with
	// the sample after its last
	per := max(int(math.Ceil(cfg.WindowS/interval.Seconds()))+1, cfg.MinWindowSamples)
	return time.Duration(max(cfg.MinLevels*per-n, 0)) * interval
}

// JobProcess is one process of a live job as the API shows it. Rank,
// LocalRank, WorldSize and Node are its place in a distributed job as its
// environment names it (absent: none).
type JobProcess struct {
	PID       int    `json:"pid"`
	UID       int    `json:"uid"`
	User      string `json:"user"`
	Comm      string `json:"comm"`
	Role      string `json:"role"`
	GPUBytes  uint64 `json:"gpu_bytes"`
	RSSBytes  uint64 `json:"rss_bytes"`
	Rank      *int   `json:"rank,omitempty"`
	LocalRank *int   `json:"local_rank,omitempty"`
	WorldSize *int   `json:"world_size,omitempty"`
	Node      string `json:"node,omitempty"`
}

// processesOf lists j's processes (in the attributor's order), a
// distributed job's in rank order: the
// processes with no rank (its launcher) first, then by rank, each rank's
// process before its workers.
func processesOf(j *attrib.Job) []JobProcess {
	out := make([]JobProcess, 0, len(j.Processes))
	for _, p := range j.Processes {
		out = append(out, JobProcess{PID: p.PID, UID: p.UID, User: p.User, Comm: p.Comm, Role: p.Role, GPUBytes: p.GPUBytes, RSSBytes: p.RSSBytes,
			Rank: p.Rank, LocalRank: p.LocalRank, WorldSize: p.WorldSize, Node: p.Node})
	}
	ranked := false
	for _, p := range out {
		ranked = ranked || p.Rank != nil
	}
	if !ranked {
		return out
	}
	order := func(p *JobProcess) int {
		if p.Rank == nil {
			return -1
		}
		return *p.Rank
	}
	sort.SliceStable(out, func(a, b int) bool {
		x, y := &out[a], &out[b]
		if ox, oy := order(x), order(y); ox != oy {
			return ox < oy
		}
		return x.Role != "worker" && y.Role == "worker"
	})
	return out
}

// JobGPU is a job's memory on one GPU.
type JobGPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Bytes uint64 `json:"bytes"`
}

// gpusOf sums the driver's records of j's processes by device, in the order
// of the devices' indexes (then UUIDs: MIG instances share their parent's).
func gpusOf(j *attrib.Job) []JobGPU {
	out := []JobGPU{}
	at := map[string]int{}
	for _, p := range j.Processes {
		for _, r := range p.GPU {
			i, ok := at[r.DeviceUUID]
			if !ok {
				i = len(out)
				at[r.DeviceUUID] = i
				out = append(out, JobGPU{Index: r.DeviceIndex, UUID: r.DeviceUUID})
			}
			out[i].Bytes += r.UsedBytes
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Index != out[b].Index {
			return out[a].Index < out[b].Index
		}
		return out[a].UUID < out[b].UUID
	})
	return out
}

// devicePoints is j's reading per GPU index, in index order: the memory
// the driver reports for its processes there and the SM utilisation it
// attributes to them (summed, at most 100; -1 when it reports none). A MIG
// instance counts for its GPU. nil for a job on no GPU.
func devicePoints(j *attrib.Job) []timeline.DevicePoint {
	var out []timeline.DevicePoint
	for _, p := range j.Processes {
		for _, r := range p.GPU {
			i := slices.IndexFunc(out, func(d timeline.DevicePoint) bool { return d.Index == r.DeviceIndex })
			if i < 0 {
				out = append(out, timeline.DevicePoint{Index: r.DeviceIndex, Util: -1})
				i = len(out) - 1
			}
			out[i].Bytes += int64(r.UsedBytes)
			if r.SMUtilPercent >= 0 {
				out[i].Util = min(max(out[i].Util, 0)+int64(r.SMUtilPercent), 100)
			}
		}
	}
	slices.SortFunc(out, func(a, b timeline.DevicePoint) int { return a.Index - b.Index })
	return out
}

// Snapshot returns the live state.
func (a *Agent) Snapshot() Snapshot {
	a.mu.RLock()
	defer a.mu.RUnlock()
	s := Snapshot{Time: a.latest.Time, Have: a.have, Backend: a.latest.Backend, Devices: a.latest.Devices,
		Dropped: a.latest.Dropped, Took: a.latest.Took, Vanished: a.latest.Attrib.VanishedBytes, Samples: a.samples,
		LastErr: a.lastErr, LastErrAt: a.lastErrAt, ProbeRej: a.probeRej, ProbeMsgs: a.probeMsgs, Started: a.start,
		Ranks: a.ranks}
	for _, v := range a.latest.Attrib.Vanished {
		i := slices.IndexFunc(s.VanishedGPUs, func(g JobGPU) bool { return g.UUID == v.DeviceUUID })
		if i < 0 {
			s.VanishedGPUs = append(s.VanishedGPUs, JobGPU{Index: v.DeviceIndex, UUID: v.DeviceUUID})
			i = len(s.VanishedGPUs) - 1
		}
		s.VanishedGPUs[i].Bytes += v.UsedBytes
	}
	now := a.latest.ProcessTime
	interval, _ := a.cfg.Sampler.Intervals()
	for _, js := range a.jobs {
		v := js.view(now, interval)
		v.IdleS, v.Idle = js.idleS, a.isIdle(js)
		s.Jobs = append(s.Jobs, v)
	}
	sort.Slice(s.Jobs, func(i, j int) bool {
		if s.Jobs[i].GPUBytes != s.Jobs[j].GPUBytes {
			return s.Jobs[i].GPUBytes > s.Jobs[j].GPUBytes
		}
		return s.Jobs[i].Key < s.Jobs[j].Key
	})
	return s
}

// view is the job as the API shows it; interval is the sampler's.
func (js *jobState) view(now time.Time, interval time.Duration) JobView {
	j := &js.Job
	v := JobView{Key: j.Key, Kind: j.Kind, Name: j.Name, RootPID: j.RootPID, UID: j.UID, User: j.User, RunID: j.RunID, Labels: js.Labels,
		Devices: j.Devices, GPUBytes: j.GPUBytes, GPUs: gpusOf(j), RSSBytes: j.RSSBytes, Alloc: j.AllocatedBytes, Reserved: j.ReservedBytes,
		Limit: js.Limit, FirstSeen: js.FirstSeen, Orphan: j.Orphan, Live: true, id: js.ID}
	for _, p := range j.Processes {
		v.PIDs = append(v.PIDs, p.PID)
	}
	v.Processes = processesOf(j)
	if !js.LastCkpt.IsZero() {
		t := js.LastCkpt
		age := now.Sub(t).Seconds()
		v.LastCkpt, v.CkptAgeS = &t, &age
	}
	if jd := js.Judged; jd != nil {
		sum := jd.Summary
		v.Monitor = &sum
		v.Verdict = sum.Verdict
		if sum.Verdict == string(analyze.VerdictInsufficientData) && jd.Own {
			left := judgingLeft(analyze.DefaultConfig(), sum.Samples, interval).Seconds()
			v.JudgingS = &left
		}
		if l := sum.Leak; l != nil && sum.Verdict == string(analyze.VerdictLeak) {
			v.Leak = true
			ls := l.LeakStart
			v.LeakStart = &ls
		}
		// the newest forecast, else the one the leak came with, counted down to now
		for _, f := range []*monitor.Finding{sum.Forecast, sum.Leak} {
			if f != nil && f.OOMAt != nil {
				eta := math.Max(0, f.OOMAt.Sub(now).Seconds())
				v.OOMETA = &eta
				break
			}
		}
	}
	return v
}
