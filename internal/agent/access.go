package agent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/store"
)

// A caller is who sent a request over the agent's Unix socket, as the
// kernel says (SO_PEERCRED when the connection was accepted); a request
// over TCP has none and is answered as before (reads open, changes with the
// token).
//
// Over the socket the API answers each user for what is theirs:
//   - their own jobs in full, every other job's owner and memory only (GPU
//     memory per GPU, RSS; no name, command line, notebook, pod, run or
//     process names, as nvitop shows other users' processes);
//   - events, timelines and runs of their own jobs (a run is theirs when its
//     job is); /metrics and /api/v1/alerts for admins only;
//   - kill, stop and restart of their own jobs, no token needed; root and
//     members of the admin group (Config.Admin) act on any job and see
//     everything.
type caller struct {
	uid   int
	admin bool
}

type callerKey struct{}

// peerConn carries a Unix connection's peer UID to the request context.
func (a *Agent) connContext(ctx context.Context, c net.Conn) context.Context {
	switch c.(type) {
	case *net.UnixConn, *probe.PeerConn:
	default:
		return ctx
	}
	_, uid := probe.PeerOf(c)
	if uid < 0 {
		// unreadable credentials are nobody's: a caller that owns nothing
		uid = -2
	}
	admin := uid == 0 || (a.cfg.Admin != nil && a.cfg.Admin(uid))
	return context.WithValue(ctx, callerKey{}, caller{uid: uid, admin: admin})
}

// callerOf is the request's caller; ok is false for a request over TCP.
func callerOf(r *http.Request) (caller, bool) {
	c, ok := r.Context().Value(callerKey{}).(caller)
	return c, ok
}

// limited reports whether r comes over the socket from a user who sees
// only their own jobs in full.
func limited(r *http.Request) (caller, bool) {
	c, ok := callerOf(r)
	return c, ok && !c.admin
}

// SocketHandler is Handler for the agent's Unix socket: the same routes,
// each caller answered by their peer credentials (see caller) rather than
// a token.
func (a *Agent) SocketHandler() http.Handler {
	mux := a.mux()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := callerOf(r)
		if !ok {
			writeErr(w, http.StatusForbidden, "no peer credentials")
			return
		}
		if !c.admin && (r.URL.Path == "/metrics" || strings.HasPrefix(r.URL.Path, "/api/v1/alerts")) {
			writeErr(w, http.StatusForbidden, "%s over the socket is for root and the admin group (it names every user's jobs)", r.URL.Path)
			return
		}
		headers(w)
		mux.ServeHTTP(w, r)
	})
}

// ConnContext is the http.Server ConnContext for the agent's Unix socket:
// it records each connection's peer credentials for SocketHandler.
func (a *Agent) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return a.connContext(ctx, c)
}

// owns reports whether c may see and act on a job owned by uid.
func (c caller) owns(uid int) bool { return c.admin || c.uid == uid }

// redact is what a user sees of another user's job: its owner, kind and
// memory, under key (its opaqueKey).
func redact(j JobView, key string) JobView {
	return JobView{Key: key, Kind: j.Kind, Name: hiddenName, RootPID: j.RootPID, UID: j.UID, User: j.User, PIDs: j.PIDs,
		Processes: []JobProcess{}, Labels: Labels{Job: hiddenName, Kind: j.Kind, User: j.User, UID: j.UID},
		Devices: j.Devices, GPUBytes: j.GPUBytes, GPUs: j.GPUs, RSSBytes: j.RSSBytes, Limit: j.Limit, FirstSeen: j.FirstSeen,
		Idle: j.Idle, IdleS: j.IdleS, Live: j.Live, EndedAt: j.EndedAt, id: j.id}
}

// opaquePrefix begins the key a user sees for another user's job.
const opaquePrefix = "job:"

// opaqueKey is the key a user sees over the socket for another user's job
// with key: "job:" and 16 hex digits of a hash of key keyed by the agent's
// secret, so it names neither the run (run:ID), the kernel nor the start
// time, and is the same in every answer for the agent's life (the caller
// may pass it back where the API takes a key: resolveKey).
func (a *Agent) opaqueKey(key string) string {
	m := hmac.New(sha256.New, a.keySecret)
	m.Write([]byte(key))
	return opaquePrefix + hex.EncodeToString(m.Sum(nil)[:8])
}

// opaqueKernel is the id a user sees over the socket for another user's
// kernel with Jupyter's id: jupyter.OpaqueKernelPrefix and 16 hex digits
// of a hash of it keyed by the agent's secret (as opaqueKey), the same in
// every answer for the agent's life; apiKernelAction takes it back.
func (a *Agent) opaqueKernel(id string) string {
	m := hmac.New(sha256.New, a.keySecret)
	m.Write([]byte("kernel\x00" + id))
	return jupyter.OpaqueKernelPrefix + hex.EncodeToString(m.Sum(nil)[:8])
}

// viewKey is the key the caller of r sees for a job of uid with key.
func (a *Agent) viewKey(r *http.Request, uid int, key string) string {
	if c, lim := limited(r); lim && !c.owns(uid) {
		return a.opaqueKey(key)
	}
	return key
}

// resolveKey is the job key an opaque key (opaqueKey) stands for, among
// the live jobs and the stored ones within the coarse retention; any other
// key is itself. An opaque key no job has is left as it is (and names no
// job).
func (a *Agent) resolveKey(ctx context.Context, key string) string {
	if !strings.HasPrefix(key, opaquePrefix) {
		return key
	}
	for _, j := range a.Snapshot().Jobs {
		if a.opaqueKey(j.Key) == key {
			return j.Key
		}
	}
	jobs, err := a.jobsIn(ctx, a.cfg.Now().Add(-a.tl.Retention().Coarse))
	if err != nil {
		return key
	}
	for _, j := range jobs {
		if a.opaqueKey(j.Key) == key {
			return j.Key
		}
	}
	return key
}

// FlagIdle marks an idle job in top's FLAGS (GET /api/v1/machine).
const FlagIdle = "idle"

// hiddenName stands for the name of another user's job.
const hiddenName = "(another user's job)"

// viewJobs is jobs as the caller of r may see them.
func (a *Agent) viewJobs(r *http.Request, jobs []JobView) []JobView {
	c, lim := limited(r)
	if !lim {
		return jobs
	}
	out := make([]JobView, len(jobs))
	for i, j := range jobs {
		if c.owns(j.UID) {
			out[i] = j
		} else {
			out[i] = redact(j, a.opaqueKey(j.Key))
		}
	}
	return out
}

// ownerOfKey is the UID of the job with key (or the opaque key standing
// for it), live or stored; ok is false when no job has it.
func (a *Agent) ownerOfKey(ctx context.Context, key string) (int, bool) {
	key = a.resolveKey(ctx, key)
	for _, j := range a.Snapshot().Jobs {
		if j.Key == key {
			return j.UID, true
		}
	}
	jobs, err := a.jobsIn(ctx, a.cfg.Now().Add(-a.tl.Retention().Coarse))
	if err != nil {
		return 0, false
	}
	for _, j := range jobs {
		if j.Key == key && j.User != "" && j.UID >= 0 {
			return j.UID, true
		}
	}
	return 0, false
}

// mayKey reports whether the caller of r may see or act on the job with
// key (always, over TCP).
func (a *Agent) mayKey(r *http.Request, key string) bool {
	c, lim := limited(r)
	if !lim {
		return true
	}
	uid, ok := a.ownerOfKey(r.Context(), key)
	return ok && c.owns(uid)
}

// mayRuns reports whether the caller of r may see and act on the runs of
// the agent's store (always, over TCP): those are the runs of the agent's
// own user (runOwner), whatever a job elsewhere claims to be, so each
// run is checked against that UID, never against a live job's.
func (a *Agent) mayRuns(r *http.Request) bool {
	c, lim := limited(r)
	return !lim || c.owns(a.runOwner)
}

// viewEvents keeps the events the caller of r may read: those of their
// own jobs and the machine's own (no job).
func (a *Agent) viewEvents(r *http.Request, evs []*store.AgentEvent) []*store.AgentEvent {
	if _, lim := limited(r); !lim {
		return evs
	}
	out := evs[:0:0]
	seen := map[string]bool{}
	for _, e := range evs {
		if e.JobKey == "" {
			out = append(out, e)
			continue
		}
		ok, done := seen[e.JobKey]
		if !done {
			ok = a.mayKey(r, e.JobKey)
			seen[e.JobKey] = ok
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

// Machine is what `vramguard top` shows, as GET /api/v1/machine serves it:
// the devices, every job with its processes (another user's redacted over
// the socket), the memory of PIDs /proc does not show, and each job's
// verdict.
type Machine struct {
	Time          time.Time                  `json:"time"`
	Backend       string                     `json:"backend"`
	Devices       []gpu.Device               `json:"devices"`
	Jobs          []attrib.Job               `json:"jobs"`
	Vanished      []gpu.Process              `json:"vanished"`
	VanishedBytes uint64                     `json:"vanished_bytes"`
	Dropped       gpu.DropCounts             `json:"dropped"`
	Scanned       int                        `json:"processes_scanned"`
	Verdicts      map[string]monitor.Summary `json:"verdicts"`
	// Idle is how long each idle job has held GPU memory without using
	// it, by key (see IdlePolicy).
	Idle map[string]float64 `json:"idle_s"`
}

func (a *Agent) apiMachine(w http.ResponseWriter, r *http.Request) {
	a.mu.RLock()
	smp := a.latest
	idle := map[string]float64{}
	flagged := map[string]bool{}
	idleS := map[string]float64{}
	for k, js := range a.jobs {
		if js.idleS > 0 {
			idleS[k] = js.idleS
		}
		flagged[k] = a.isIdle(js)
	}
	a.mu.RUnlock()
	m := Machine{Time: smp.Time, Backend: smp.Backend, Devices: smp.Devices, Jobs: []attrib.Job{}, Vanished: smp.Attrib.Vanished,
		VanishedBytes: smp.Attrib.VanishedBytes, Dropped: smp.Dropped, Scanned: smp.Attrib.Scanned, Verdicts: map[string]monitor.Summary{}, Idle: idle}
	if m.Devices == nil {
		m.Devices = []gpu.Device{}
	}
	if m.Vanished == nil {
		m.Vanished = []gpu.Process{}
	}
	c, lim := limited(r)
	for _, j := range smp.Attrib.Jobs {
		key := j.Key
		if lim && !c.owns(j.UID) {
			j = redactJob(j, a.opaqueKey(key))
		} else if jd := smp.Judged[j.Key]; jd != nil {
			m.Verdicts[j.Key] = jd.Summary
		}
		if flagged[key] {
			j.Flags = append(slices.Clip(j.Flags), FlagIdle)
		}
		if s, ok := idleS[key]; ok {
			idle[j.Key] = s
		}
		m.Jobs = append(m.Jobs, j)
	}
	writeJSON(w, http.StatusOK, m)
}

// redactJob is another user's job as top shows it: owner, memory and PIDs,
// under key (its opaqueKey).
func redactJob(j attrib.Job, key string) attrib.Job {
	out := attrib.Job{Key: key, Kind: j.Kind, Name: hiddenName, RootPID: j.RootPID, UID: j.UID, User: j.User,
		Devices: j.Devices, GPUBytes: j.GPUBytes, RSSBytes: j.RSSBytes, SMUtilPercent: j.SMUtilPercent, Orphan: j.Orphan}
	for _, p := range j.Processes {
		out.Processes = append(out.Processes, attrib.Process{PID: p.PID, PPID: p.PPID, UID: p.UID, User: p.User, Role: p.Role,
			RSSBytes: p.RSSBytes, GPUBytes: p.GPUBytes, GPU: p.GPU, StartTicks: p.StartTicks, Simulated: p.Simulated})
	}
	return out
}
