package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vramguard/vramguard/internal/agent/web"
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/runctl"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/users"
)

// ErrTokenRequired is returned by CheckListen for a non-loopback address
// without a token.
var ErrTokenRequired = errors.New("listening beyond loopback needs a token (--token or --token-file)")

// CheckListen refuses to serve a non-loopback address without a token. An
// address without a host ("":9345) or with a host name that is not
// "localhost" counts as non-loopback.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if token != "" || IsLoopback(host) {
		return nil
	}
	return fmt.Errorf("%s: %w", addr, ErrTokenRequired)
}

// IsLoopback reports whether host names only the loopback interface.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Endpoint is one entry of the API index (GET /api/v1/).
type Endpoint struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	// Query lists the query parameters the endpoint takes.
	Query       string `json:"query,omitempty"`
	Description string `json:"description"`
	// Token is true where the request needs Authorization: Bearer TOKEN.
	Token bool `json:"token"`
	h     http.HandlerFunc
}

// endpoints are every route the agent serves but the dashboard's files:
// what Handler registers and what GET /api/v1/ lists, from one table.
// /metrics's handler is Handler's (it holds the registry).
func (a *Agent) endpoints() []Endpoint {
	return []Endpoint{
		{"GET", "/metrics", "", "Prometheus metrics (docs/SERVE.md lists them)", false, nil},
		{"GET", "/healthz", "", "200 while samples are fresh, 503 while starting or stale", false, a.healthz},
		{"GET", "/api/v1/", "", "this index", false, a.apiIndex},
		{"GET", "/api/v1/status", "", "version, GPU backend, sampling interval, retention", false, a.apiStatus},
		{"GET", "/api/v1/devices", "", "GPUs with memory, utilisation and the jobs on each", false, a.apiDevices},
		{"GET", "/api/v1/machine", "", "what top shows: devices, every job with its processes and verdict, memory of PIDs /proc does not show", false, a.apiMachine},
		{"GET", "/api/v1/jobs", "range=1h | from=&to=", "live jobs, and the jobs seen in the range", false, a.apiJobs},
		{"GET", "/api/v1/jobs/{key}", "", "one job, with the monitor's summary", false, a.apiJob},
		{"GET", "/api/v1/timelines", "range=1h | from=&to=, job=KEY (repeatable), points=N", "memory timelines as columns, with the range's events", false, a.apiTimelines},
		{"GET", "/api/v1/events", "after=ID, job=KEY, range=, limit=N, wait=25s", "events after an id; wait holds the request until one arrives", false, a.apiEvents},
		{"GET", "/api/v1/alerts", "", "recent alerts and webhook counters", false, a.apiAlerts},
		{"GET", "/api/v1/report", "by=user|job|gpu | group=GROUP, range=168h | from=&to=", "GPU accounting: memory-hours, held, busy and idle hours, peak, deaths, per user, job or GPU; with group, a distributed job's efficiency on this node per rank (GPU memory peak against the GPU's total, busy and idle hours, host memory peak against what the job asked for); over the socket the caller's own jobs", false, a.apiReport},
		{"GET", "/api/v1/notices", "after=ID", "lines for users (an idle job's owner); over the socket the caller's own", false, a.apiNotices},
		{"GET", "/api/v1/kernels", "", "Jupyter kernels with their notebook, owner, GPU memory and idle flag; over the socket another user's owner and memory only", false, a.apiKernels},
		{"GET", "/api/v1/runs", "", "the newest 100 supervised runs", false, a.apiRuns},
		{"GET", "/api/v1/runs/{id}", "", "a run's post-mortem document (as explain --json prints it) and its record", false, a.apiRun},
		{"GET", "/api/v1/runs/{id}/snapshot", "device=N, points=N", "the view of the memory snapshot a run dumped at its OOM (run --oom-snapshot), as snapshot --serve draws it", false, a.apiRunSnapshot},
		{"POST", "/api/v1/events", "", `a note on a job's timeline: {"job_key": KEY, "message": TEXT}`, true, a.apiPostEvent},
		{"POST", "/api/v1/jobs/{key}/kill", "signal=TERM|KILL", "signal a live job's root process", true, a.apiKill},
		{"POST", "/api/v1/runs/{id}/stop", "", "stop a supervised run, as vramguard stop does", true, a.apiStop},
		{"POST", "/api/v1/runs/{id}/restart", "", "restart a supervised run's attempt now, as vramguard restart does", true, a.apiRestart},
		{"POST", "/api/v1/kernels/{id}/{action}", "", "interrupt, restart or shutdown a Jupyter kernel through its server, as vramguard kernels does; over the socket the caller's own kernels unless root or the admin group", true, a.apiKernelAction},
	}
}

// Handler returns the agent's HTTP handler: the dashboard at /, the JSON API
// under /api/v1/ (GET /api/v1/ lists it), /metrics and /healthz. Every
// request that is not GET or HEAD under /api/v1/ must carry the token
// (Authorization: Bearer TOKEN); without it the answer is 401 before any
// routing. An empty token disables every mutating endpoint.
func (a *Agent) Handler(token string) http.Handler {
	return secure(token, a.mux())
}

// mux routes every endpoint and the dashboard's files.
func (a *Agent) mux() *http.ServeMux {
	mux := http.NewServeMux()
	reg := a.Registry()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
	for _, e := range a.endpoints() {
		if e.Path == "/metrics" {
			e.h = metrics.ServeHTTP
		}
		p := e.Path
		if p == "/api/v1/" {
			p += "{$}"
			mux.HandleFunc(e.Method+" /api/v1", e.h)
		}
		mux.HandleFunc(e.Method+" "+p, e.h)
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "no such endpoint: %s %s (GET /api/v1/ lists them)", r.Method, r.URL.Path)
	})
	sub, _ := fs.Sub(web.Assets, "static")
	files := http.FileServer(http.FS(sub))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		files.ServeHTTP(w, r)
	})
	return mux
}

func (a *Agent) apiIndex(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"version": a.cfg.Version, "endpoints": a.endpoints(),
		"docs": "docs/SERVE.md (HTTP, Metrics); mutating requests need Authorization: Bearer TOKEN"})
}

// secure answers 401 to a mutating API request without the token, before
// the mux sees it, and sets headers every answer carries.
func secure(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := headers(w)
		if strings.HasPrefix(r.URL.Path, "/api/") && r.Method != http.MethodGet && r.Method != http.MethodHead {
			got := []byte(r.Header.Get("Authorization"))
			if token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
				h.Set("WWW-Authenticate", `Bearer realm="vramguard"`)
				writeErr(w, http.StatusUnauthorized, "this request needs the agent's token (Authorization: Bearer TOKEN)")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// headers sets the headers every answer carries.
func headers(w http.ResponseWriter) http.Header {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
	return h
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, code int, format string, a ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, a...)})
}

func (a *Agent) healthz(w http.ResponseWriter, r *http.Request) {
	s := a.Snapshot()
	proc, _ := a.cfg.Sampler.Intervals()
	age := a.cfg.Now().Sub(s.Time)
	switch {
	case !s.Have:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "starting"})
	case age > 5*proc+5*time.Second:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "stale", "sample_age_s": age.Seconds()})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "sample_age_s": age.Seconds(), "backend": s.Backend})
	}
}

func (a *Agent) apiStatus(w http.ResponseWriter, r *http.Request) {
	s := a.Snapshot()
	proc, _ := a.cfg.Sampler.Intervals()
	ret := a.tl.Retention()
	var lastErr string
	if s.LastErr != nil {
		lastErr = s.LastErr.Error()
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"version": a.cfg.Version, "backend": s.Backend, "started": s.Started, "sample_time": s.Time,
		"interval_s": proc.Seconds(), "samples": s.Samples, "last_error": lastErr, "now": a.cfg.Now(),
		"retention": map[string]any{"fine_s": ret.Fine.Seconds(), "coarse_s": ret.Coarse.Seconds(), "coarse_step_s": ret.CoarseStep.Seconds(), "max_bytes": ret.MaxBytes},
	})
}

func (a *Agent) apiDevices(w http.ResponseWriter, r *http.Request) {
	s := a.Snapshot()
	out := make([]map[string]any, 0, len(s.Devices))
	for _, d := range s.Devices {
		var jobs []string
		for _, j := range s.Jobs {
			for _, i := range j.Devices {
				if i == d.Index {
					jobs = append(jobs, a.viewKey(r, j.UID, j.Key))
				}
			}
		}
		out = append(out, map[string]any{"index": d.Index, "uuid": d.UUID, "name": d.Name, "total_bytes": d.TotalBytes,
			"used_bytes": d.UsedBytes, "free_bytes": d.FreeBytes, "util_percent": d.UtilPercent, "mig_parent": d.ParentUUID, "jobs": jobs})
	}
	writeJSON(w, http.StatusOK, map[string]any{"time": s.Time, "backend": s.Backend, "devices": out})
}

// parseRange reads ?range=DURATION (default 1h) or ?from=&to= (RFC 3339 or
// Unix ms) and returns [from, to].
func (a *Agent) parseRange(r *http.Request) (time.Time, time.Time, error) {
	q := r.URL.Query()
	to := a.cfg.Now()
	if v := q.Get("to"); v != "" {
		t, err := parseTime(v)
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("to: %w", err)
		}
		to = t
	}
	from := to.Add(-time.Hour)
	if v := q.Get("range"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return time.Time{}, time.Time{}, fmt.Errorf("range %q: want a duration such as 15m or 24h", v)
		}
		from = to.Add(-d)
	}
	if v := q.Get("from"); v != "" {
		t, err := parseTime(v)
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("from: %w", err)
		}
		from = t
	}
	if !from.Before(to) {
		return time.Time{}, time.Time{}, errors.New("from must be before to")
	}
	return from, to, nil
}

// queryInt reads the query parameter name, when given, into n: a decimal
// integer in [lo, hi]. Otherwise it answers 400 ("NAME "V": want WANT")
// and returns false.
func queryInt[T int | int64](w http.ResponseWriter, q url.Values, name string, lo, hi T, want string, n *T) bool {
	v := q.Get(name)
	if v == "" {
		return true
	}
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil || x < int64(lo) || x > int64(hi) {
		writeErr(w, http.StatusBadRequest, "%s %q: want %s", name, v, want)
		return false
	}
	*n = T(x)
	return true
}

func parseTime(v string) (time.Time, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(n), nil
	}
	return time.Parse(time.RFC3339, v)
}

// jobsIn lists live jobs and the stored ones seen in [from, to].
func (a *Agent) jobsIn(ctx context.Context, from time.Time) ([]JobView, error) {
	s := a.Snapshot()
	out := s.Jobs
	live := map[string]bool{}
	for _, j := range out {
		live[j.Key] = true
	}
	stored, err := a.cfg.Store.AgentJobs(ctx, from)
	if err != nil {
		return nil, err
	}
	for _, j := range stored {
		if live[j.Key] {
			continue
		}
		v := JobView{Key: j.Key, Kind: j.Kind, Name: j.Name, FirstSeen: j.FirstSeen, EndedAt: j.EndedAt, Processes: []JobProcess{}, id: j.ID}
		var info struct {
			Labels  Labels `json:"labels"`
			Devices []int  `json:"devices"`
			Limit   uint64 `json:"limit_bytes"`
			RootPID int    `json:"root_pid"`
		}
		_ = json.Unmarshal(j.Info, &info)
		v.Labels, v.Devices, v.Limit, v.RootPID = info.Labels, info.Devices, info.Limit, info.RootPID
		v.UID, v.User = info.Labels.UID, info.Labels.User
		if v.User == "" { // recorded before owners were
			v.UID, v.User = users.NoUID, users.Unknown
		}
		if v.EndedAt == nil {
			t := j.LastSeen
			v.EndedAt = &t
		}
		out = append(out, v)
	}
	return out, nil
}

func (a *Agent) apiJobs(w http.ResponseWriter, r *http.Request) {
	from, _, err := a.parseRange(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	jobs, err := a.jobsIn(r.Context(), from)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if jobs == nil {
		jobs = []JobView{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"time": a.Snapshot().Time, "jobs": a.viewJobs(r, jobs)})
}

func (a *Agent) apiJob(w http.ResponseWriter, r *http.Request) {
	key := a.resolveKey(r.Context(), r.PathValue("key"))
	for _, j := range a.Snapshot().Jobs {
		if j.Key == key {
			writeJSON(w, http.StatusOK, a.viewJobs(r, []JobView{j})[0])
			return
		}
	}
	jobs, err := a.jobsIn(r.Context(), time.Time{})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	for _, j := range jobs {
		if j.Key == key {
			writeJSON(w, http.StatusOK, a.viewJobs(r, []JobView{j})[0])
			return
		}
	}
	writeErr(w, http.StatusNotFound, "no job %q", r.PathValue("key"))
}

// Timeline is one job's memory over a range, as columns (what uPlot takes).
type Timeline struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Limit is the total memory of the GPUs the job holds memory on
	// (Devices).
	Limit   uint64 `json:"limit_bytes"`
	Devices []int  `json:"devices"`
	Live    bool   `json:"live"`
	// StepS is the sampling step of the points' resolution; GapS the
	// longest stretch between two points that had samples all along: the
	// job had none for a longer one (it had not started, had ended, or the
	// agent was not running).
	StepS    float64   `json:"step_s"`
	GapS     float64   `json:"gap_s"`
	T        []float64 `json:"t"` // Unix seconds
	GPU      []int64   `json:"gpu"`
	RSS      []int64   `json:"rss"`
	Alloc    []*int64  `json:"alloc"`
	Reserved []*int64  `json:"reserved"`
}

// gapSteps is how many points' worth of time without a sample breaks a
// timeline's line.
const gapSteps = 5

// apiTimelines answers ?range= (or from/to) [&job=KEY ...] [&points=N]:
// every job's (or the named jobs') timeline over the range, with the
// range's events.
func (a *Agent) apiTimelines(w http.ResponseWriter, r *http.Request) {
	from, to, err := a.parseRange(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	maxPts := 2000
	if !queryInt(w, r.URL.Query(), "points", 10, 100000, "10..100000", &maxPts) {
		return
	}
	ctx := r.Context()
	want := map[string]bool{}
	for _, k := range r.URL.Query()["job"] {
		want[a.resolveKey(ctx, k)] = true
	}
	jobs, err := a.jobsIn(ctx, from)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	out := []Timeline{}
	var per []int // how many stored points each of out's stands for
	res := ResFine
	for _, j := range jobs {
		if len(want) > 0 && !want[j.Key] {
			continue
		}
		if j.id == 0 {
			continue
		}
		pts, rs, err := a.tl.Query(ctx, j.id, from, to, 0)
		if err != nil {
			writeErr(w, http.StatusInternalServerError, "%v", err)
			return
		}
		res = rs
		per = append(per, bucketSize(len(pts), maxPts))
		pts = downsample(pts, maxPts)
		devs := j.Devices
		if devs == nil {
			devs = []int{}
		}
		name, key := j.Name, j.Key
		if !a.mayKey(r, j.Key) {
			name, key = hiddenName, a.opaqueKey(j.Key)
		}
		tl := Timeline{Key: key, Name: name, Kind: j.Kind, Limit: j.Limit, Devices: devs, Live: j.Live,
			T: make([]float64, len(pts)), GPU: make([]int64, len(pts)), RSS: make([]int64, len(pts)),
			Alloc: make([]*int64, len(pts)), Reserved: make([]*int64, len(pts))}
		for i, p := range pts {
			tl.T[i] = float64(p.T) / 1000
			tl.GPU[i], tl.RSS[i] = p.GPU, p.RSS
			if p.Alloc >= 0 {
				v := p.Alloc
				tl.Alloc[i] = &v
			}
			if p.Reserved >= 0 {
				v := p.Reserved
				tl.Reserved[i] = &v
			}
		}
		out = append(out, tl)
	}
	step, _ := a.cfg.Sampler.Intervals()
	if res == ResCoarse {
		step = a.tl.Retention().CoarseStep
	}
	for i := range out {
		out[i].StepS, out[i].GapS = step.Seconds(), float64(gapSteps*per[i])*step.Seconds()
	}
	evs, err := a.cfg.Store.AgentEvents(ctx, store.AgentEventFilter{Since: from, Limit: 5000})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if evs == nil {
		evs = []*store.AgentEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"from": from, "to": to, "timelines": out, "events": a.viewEvents(r, evs)})
}

// apiEvents answers ?after=ID [&job=KEY] [&range=] [&limit=N] [&wait=DUR]:
// with wait, it holds the request until an event newer than after exists
// (at most 30 s), for live updates without polling.
func (a *Agent) apiEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.AgentEventFilter{JobKey: a.resolveKey(r.Context(), q.Get("job")), Limit: 500}
	if !queryInt(w, q, "after", math.MinInt64, math.MaxInt64, "an event id", &f.AfterID) ||
		!queryInt(w, q, "limit", 1, math.MaxInt, "a positive number", &f.Limit) {
		return
	}
	if q.Get("range") != "" {
		from, _, err := a.parseRange(r)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "%v", err)
			return
		}
		f.Since = from
	}
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "wait %q: want a duration", v)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), min(d, 30*time.Second))
		a.WaitEvent(ctx, f.AfterID)
		cancel()
	}
	evs, err := a.cfg.Store.AgentEvents(r.Context(), f)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if evs == nil {
		evs = []*store.AgentEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": a.viewEvents(r, evs)})
}

func (a *Agent) apiAlerts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"recent": a.alerts.Recent(), "stats": a.alerts.Stats()})
}

func (a *Agent) apiRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := a.cfg.Store.Runs(r.Context(), 100)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if runs == nil {
		runs = []*store.Run{}
	}
	if !a.mayRuns(r) {
		runs = []*store.Run{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": runs})
}

// pathRun is the run the request's path names ({id}); when there is none,
// or the store fails, it answers the request itself and ok is false.
//
// The store holds the runs of the agent's own user (runOwner). A caller
// over the socket who may not see that user's runs is answered as for a
// run that does not exist, before the reference is resolved: the same 404
// whatever it names, so neither an error (an ambiguous prefix lists the
// runs it matches) nor the status tells another user's run from none.
func (a *Agent) pathRun(w http.ResponseWriter, r *http.Request) (run *store.Run, ok bool) {
	if !a.mayRuns(r) {
		writeErr(w, http.StatusNotFound, "no run %q", r.PathValue("id"))
		return nil, false
	}
	run, err := a.cfg.Store.Resolve(r.Context(), r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		writeErr(w, http.StatusNotFound, "no run %q", r.PathValue("id"))
		return nil, false
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return nil, false
	}
	return run, true
}

// pathDocument is pathRun's run and its post-mortem (explain's document);
// on false it has answered w.
func (a *Agent) pathDocument(w http.ResponseWriter, r *http.Request) (*store.Run, *postmortem.Document, bool) {
	run, ok := a.pathRun(w, r)
	if !ok {
		return nil, nil, false
	}
	doc, err := postmortem.Build(r.Context(), a.cfg.Store, run, a.cfg.Now())
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return nil, nil, false
	}
	return run, doc, true
}

func (a *Agent) apiRun(w http.ResponseWriter, r *http.Request) {
	run, doc, ok := a.pathDocument(w, r)
	if !ok {
		return
	}
	// the document `explain --json` prints, and the run's record
	writeJSON(w, http.StatusOK, struct {
		*postmortem.Document
		Run *store.Run `json:"run"`
	}{doc, run})
}

// apiPostEvent records a note on the timeline: {"job_key": ..., "message": ...}.
func (a *Agent) apiPostEvent(w http.ResponseWriter, r *http.Request) {
	var body struct {
		JobKey  string `json:"job_key"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
		writeErr(w, http.StatusBadRequest, "body: %v", err)
		return
	}
	if strings.TrimSpace(body.Message) == "" {
		writeErr(w, http.StatusBadRequest, "message is empty")
		return
	}
	if _, lim := limited(r); lim && (body.JobKey == "" || !a.mayKey(r, body.JobKey)) {
		writeErr(w, http.StatusForbidden, "a note over the socket goes on one of your own jobs")
		return
	}
	e := &store.AgentEvent{JobKey: body.JobKey, Kind: EventNote, Message: body.Message}
	for _, j := range a.Snapshot().Jobs {
		if j.Key == body.JobKey {
			e.JobName = j.Name
		}
	}
	if err := a.AddEvent(r.Context(), e); err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, http.StatusCreated, e)
}

// apiKill sends SIGTERM (or ?signal=KILL) to a live job's root process,
// after checking it is still the process the sampler saw.
func (a *Agent) apiKill(w http.ResponseWriter, r *http.Request) {
	key := a.resolveKey(r.Context(), r.PathValue("key"))
	var job *JobView
	for _, j := range a.Snapshot().Jobs {
		if j.Key == key {
			job = &j
		}
	}
	if job == nil {
		writeErr(w, http.StatusNotFound, "no live job %q", r.PathValue("key"))
		return
	}
	if c, lim := limited(r); lim && !c.owns(job.UID) {
		writeErr(w, http.StatusForbidden, "job %s belongs to %s: only its owner, root or the admin group may kill it", r.PathValue("key"), job.User)
		return
	}
	sig := syscall.SIGTERM
	switch r.URL.Query().Get("signal") {
	case "", "TERM":
	case "KILL":
		sig = syscall.SIGKILL
	default:
		writeErr(w, http.StatusBadRequest, "signal must be TERM or KILL")
		return
	}
	if a.cfg.Simulated(job.RootPID) {
		writeErr(w, http.StatusConflict, "pid %d belongs to a simulated scenario; nothing to signal", job.RootPID)
		return
	}
	a.mu.RLock()
	js := a.jobs[key]
	var ticks uint64
	if js != nil {
		for _, p := range js.Job.Processes {
			if p.PID == job.RootPID {
				ticks = p.StartTicks
			}
		}
	}
	a.mu.RUnlock()
	if !runctl.Alive(procfs.FS{}, job.RootPID, ticks) {
		writeErr(w, http.StatusConflict, "pid %d is no longer the job's process", job.RootPID)
		return
	}
	if err := syscall.Kill(job.RootPID, sig); err != nil {
		writeErr(w, http.StatusInternalServerError, "signal pid %d: %v", job.RootPID, err)
		return
	}
	_ = a.AddEvent(r.Context(), &store.AgentEvent{JobKey: key, JobName: job.Name, Kind: EventNote,
		Message: fmt.Sprintf("%s sent to pid %d through the API", sig, job.RootPID)})
	writeJSON(w, http.StatusAccepted, map[string]any{"pid": job.RootPID, "signal": sig.String()})
}

// apiStop asks a supervised run's supervisor to stop it (as `vramguard
// stop` does): runctl.OpStop on its control socket.
func (a *Agent) apiStop(w http.ResponseWriter, r *http.Request) {
	a.signalRun(w, r, runctl.OpStop)
}

// apiRestart asks a supervised run's supervisor to restart its running
// attempt now (as `vramguard restart` does): runctl.OpRestart.
func (a *Agent) apiRestart(w http.ResponseWriter, r *http.Request) {
	a.signalRun(w, r, runctl.OpRestart)
}

// signalRun sends op to the supervisor of the run the path names, after
// runctl.Request's checks, and notes the request on the run's timeline.
func (a *Agent) signalRun(w http.ResponseWriter, r *http.Request, op runctl.Op) {
	what := string(op)
	ctx := r.Context()
	run, ok := a.pathRun(w, r)
	if !ok {
		return
	}
	switch err := runctl.Request(procfs.FS{}, run, op); {
	case errors.Is(err, runctl.ErrNotRunning):
		writeErr(w, http.StatusConflict, "%v", err)
		return
	case errors.Is(err, syscall.EPERM):
		writeErr(w, http.StatusForbidden, "%v (the agent's user may not control the run's owner's runs)", err)
		return
	case err != nil:
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	e := &store.AgentEvent{JobKey: "run:" + run.ID, JobName: run.Name, Kind: EventNote}
	for _, j := range a.Snapshot().Jobs {
		if j.Key == e.JobKey {
			e.JobName = j.Name
		}
	}
	e.Message = fmt.Sprintf("%s of run %s (attempt %d) requested through the API", what, run.ID, run.Attempts)
	_ = a.AddEvent(ctx, e)
	writeJSON(w, http.StatusAccepted, map[string]any{"run": run.ID, "supervisor_pid": run.SupervisorPID, "attempt": run.Attempts})
}
