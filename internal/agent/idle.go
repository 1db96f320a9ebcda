package agent

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/units"
)

// Idle holders: a job is idle when it holds GPU memory and the utilisation
// the driver attributes to its processes stays under Threshold percent for
// Window. The agent counts how long each job has been under the threshold
// (vramguard_job_idle_seconds) and flags it idle from Window on; with
// NotifyAfter it tells the owner once per idle stretch (an idle alert
// carrying the user name, and a notice their next vramguard command
// prints). Nothing is stopped by this policy.
const (
	EventIdle    = "idle"
	EventReclaim = "reclaim"
)

// DefaultIdleThreshold and DefaultIdleWindow are the idle policy's
// defaults.
const (
	DefaultIdleThreshold = 1
	DefaultIdleWindow    = 30 * time.Minute
)

// IdlePolicy says when a job holding GPU memory counts as idle.
type IdlePolicy struct {
	// Threshold is the utilisation (percent) under which a job counts as
	// unused (default DefaultIdleThreshold).
	Threshold int
	// Window is how long it must stay under it to be idle (default
	// DefaultIdleWindow).
	Window time.Duration
	// NotifyAfter tells the owner once a job has been idle this long (0:
	// never).
	NotifyAfter time.Duration
	// ReclaimAfter shuts a notebook kernel down (through its Jupyter
	// server, Config.Reclaim) once it has been idle this long, after
	// telling its owner (0: never; other jobs are never stopped).
	ReclaimAfter time.Duration
}

func (p IdlePolicy) withDefaults() IdlePolicy {
	if p.Threshold <= 0 {
		p.Threshold = DefaultIdleThreshold
	}
	if p.Window <= 0 {
		p.Window = DefaultIdleWindow
	}
	return p
}

// idleTrack is one job's idle stretch.
type idleTrack struct {
	since     time.Time // when it went under the threshold; zero while in use
	notified  bool      // the owner was told of this stretch
	reclaimed bool      // its kernel was asked to shut down
}

// unused reports whether j holds GPU memory and uses under threshold
// percent of it. A job whose utilisation the driver does not report is
// never counted unused.
func unused(j *attrib.Job, threshold int) bool {
	return j.GPUBytes > 0 && j.SMUtilPercent >= 0 && j.SMUtilPercent < threshold
}

// observeIdle updates js's idle stretch at now and returns the idle event
// to raise, if the owner is due to be told.
func (a *Agent) observeIdle(js *jobState, now time.Time) *store.AgentEvent {
	p := a.cfg.Idle.withDefaults()
	j := &js.Job
	if !unused(j, p.Threshold) {
		js.idle = idleTrack{}
		js.idleS = 0
		return nil
	}
	if js.idle.since.IsZero() {
		js.idle.since = now
	}
	js.idleS = now.Sub(js.idle.since).Seconds()
	if e := a.reclaimIdle(js, p, now); e != nil {
		return e
	}
	if p.NotifyAfter <= 0 || js.idle.notified || now.Sub(js.idle.since) < max(p.NotifyAfter, p.Window) {
		return nil
	}
	js.idle.notified = true
	idle := now.Sub(js.idle.since).Round(time.Second)
	text := idleNotice(j, idle)
	a.addNotice(j.UID, j.User, now, text)
	return a.jobEvent(j, now, EventIdle, text, map[string]any{"user": j.User, "uid": j.UID, "idle_s": idle.Seconds(), "gpu_bytes": j.GPUBytes,
		"devices": j.Devices})
}

// reclaimIdle, for a notebook kernel idle past the policy's ReclaimAfter,
// tells its owner (a notice and a reclaim alert) and then asks its server
// to shut it down (Config.Reclaim, in the background); it returns the
// event. Anything else is left alone.
func (a *Agent) reclaimIdle(js *jobState, p IdlePolicy, now time.Time) *store.AgentEvent {
	j := &js.Job
	if p.ReclaimAfter <= 0 || a.cfg.Reclaim == nil || j.Kind != attrib.KindNotebook || j.Kernel == "" || js.idle.reclaimed ||
		now.Sub(js.idle.since) < max(p.ReclaimAfter, p.Window) {
		return nil
	}
	js.idle.reclaimed, js.idle.notified = true, true
	idle := now.Sub(js.idle.since).Round(time.Second)
	text := fmt.Sprintf("vramguard: shutting down kernel %s (%s, pid %d): it has held %s on GPU %s unused for %s (serve --reclaim-idle %s)",
		shortKernelID(j.Kernel), notebookOf(j), j.RootPID, units.FormatBytes(j.GPUBytes), gpuList(j.Devices), idle, p.ReclaimAfter)
	a.addNotice(j.UID, j.User, now, text)
	kernel, key, name := j.Kernel, j.Key, j.Name
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.cfg.Reclaim(ctx, kernel); err != nil {
			a.log.Warn("reclaim idle kernel", "kernel", kernel, "err", err)
			_ = a.AddEvent(ctx, &store.AgentEvent{JobKey: key, JobName: name, Kind: EventNote, Message: "reclaiming the idle kernel failed: " + err.Error()})
		}
	}()
	return a.jobEvent(j, now, EventReclaim, text, map[string]any{"user": j.User, "uid": j.UID, "idle_s": idle.Seconds(), "gpu_bytes": j.GPUBytes,
		"devices": j.Devices, "kernel": kernel})
}

func notebookOf(j *attrib.Job) string {
	if j.Notebook != "" {
		return j.Notebook
	}
	return j.Name
}

func gpuList(devs []int) string {
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = strconv.Itoa(d)
	}
	return strings.Join(s, ",")
}

// isIdle reports whether the job has been unused for the policy's window.
func (a *Agent) isIdle(js *jobState) bool {
	return js.idleS > 0 && js.idleS >= a.cfg.Idle.withDefaults().Window.Seconds()
}

// idleNotice is the one line the owner reads: job, GPU, memory held, for
// how long, and how to release it.
func idleNotice(j *attrib.Job, idle time.Duration) string {
	gpus := make([]string, len(j.Devices))
	for i, d := range j.Devices {
		gpus[i] = strconv.Itoa(d)
	}
	how := fmt.Sprintf("end it (kill %d) if you are done", j.RootPID)
	if j.Kind == attrib.KindNotebook {
		how = "shut the kernel down (vramguard kernels shutdown " + shortKernelID(j.Kernel) + ") or free its tensors"
	}
	return fmt.Sprintf("vramguard: %s (pid %d) has held %s on GPU %s unused for %s; %s",
		j.Name, j.RootPID, units.FormatBytes(j.GPUBytes), strings.Join(gpus, ","), idle, how)
}

func shortKernelID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// Notice is a line for one user, printed by their next vramguard command
// (GET /api/v1/notices).
type Notice struct {
	ID   int64     `json:"id"`
	UID  int       `json:"uid"`
	User string    `json:"user"`
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

// maxNotices bounds the notices kept (the oldest go first).
const maxNotices = 1000

func (a *Agent) addNotice(uid int, user string, t time.Time, text string) {
	a.noticeSeq++
	a.notices = append(a.notices, Notice{ID: a.noticeSeq, UID: uid, User: user, Time: t, Text: text})
	if len(a.notices) > maxNotices {
		a.notices = a.notices[len(a.notices)-maxNotices:]
	}
}

// apiNotices answers ?after=ID: the notices newer than ID, over the socket
// only the caller's own.
func (a *Agent) apiNotices(w http.ResponseWriter, r *http.Request) {
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "after %q: want a notice id", v)
			return
		}
		after = n
	}
	c, viaSocket := callerOf(r)
	a.mu.RLock()
	out := []Notice{}
	for _, n := range a.notices {
		if n.ID > after && (!viaSocket || n.UID == c.uid) {
			out = append(out, n)
		}
	}
	a.mu.RUnlock()
	writeJSON(w, http.StatusOK, map[string]any{"notices": out})
}
