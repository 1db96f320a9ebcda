package agent

import (
	"net/http"
	"strconv"
	"time"

	"github.com/vramguard/vramguard/internal/jupyter"
)

// apiKernels answers GET /api/v1/kernels: the machine's Jupyter kernels as
// `vramguard kernels` lists them (the servers of Config.KernelDirs, and
// kernel processes no server lists), charged the GPU memory of the
// agent's newest sample. A kernel is idle (Entry.Idle) when Jupyter says
// so for the idle window, or when the agent flags a job of its processes
// idle (see IdlePolicy). Over the socket a user sees their own kernels in
// full and another user's owner, process and memory only.
func (a *Agent) apiKernels(w http.ResponseWriter, r *http.Request) {
	servers, err := jupyter.Discover(a.cfg.KernelDirs)
	if err != nil {
		a.log.Debug("jupyter server files", "err", err)
	}
	a.mu.RLock()
	jobs := a.latest.Attrib.Jobs
	// the agent's own idle flag (utilisation under the threshold for the
	// window) by process: a kernel holding such a job is idle too
	idlePIDs := map[int]bool{}
	for _, js := range a.jobs {
		if a.isIdle(js) {
			for _, p := range js.Job.Processes {
				idlePIDs[p.PID] = true
			}
		}
	}
	a.mu.RUnlock()
	c := &jupyter.Collector{Servers: servers, Procs: jupyter.LiveProcs{}, Jobs: jobs, Now: a.cfg.Now, IdleWindow: a.cfg.Idle.withDefaults().Window}
	es, err := c.Collect(r.Context())
	if err != nil {
		a.log.Warn("jupyter kernels", "err", err)
	}
	for i := range es {
		for _, pid := range es[i].PIDs {
			if idlePIDs[pid] && es[i].GPUBytes > 0 {
				es[i].Idle = true
			}
		}
	}
	if caller, lim := limited(r); lim {
		for i, e := range es {
			if !caller.owns(e.UID) {
				es[i] = redactKernel(e, a.opaqueKernel(e.KernelID))
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"kernels": es})
}

// redactKernel is another user's kernel as a user sees it, under id (its
// opaqueKernel): its owner, process, memory and whether it is an idle
// holder (as top flags another user's idle job); no notebook, server,
// session, run or Jupyter's kernel id.
func redactKernel(e jupyter.Entry, id string) jupyter.Entry {
	return jupyter.Entry{Notebook: hiddenName, KernelID: id, PID: e.PID, PIDs: e.PIDs, UID: e.UID, User: e.User,
		GPUBytes: e.GPUBytes, AllocatedBytes: e.AllocatedBytes, ReservedBytes: e.ReservedBytes, RSSBytes: e.RSSBytes,
		ExecutionState: e.ExecutionState, IdleS: e.IdleS, Idle: e.Idle}
}

// kernelPast is what each kernel action did, for the answer and the log.
var kernelPast = map[string]string{"interrupt": "interrupted", "restart": "restarted", "shutdown": "shut down"}

// apiKernelAction answers POST /api/v1/kernels/{id}/{action}: the action
// (interrupt, restart, shutdown) on the kernel with that id, through the
// Jupyter server that lists it, with that server's token (the agent reads
// every user's server files when it runs as root). Over the socket only
// the kernel's owner, root or the admin group may act on it; another
// user's kernel may be named by the opaque id the socket showed for it.
func (a *Agent) apiKernelAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	past, ok := kernelPast[action]
	if !ok {
		writeErr(w, http.StatusNotFound, "no kernel action %q: interrupt, restart or shutdown", action)
		return
	}
	servers, err := jupyter.Discover(a.cfg.KernelDirs)
	if err != nil {
		a.log.Debug("jupyter server files", "err", err)
	}
	c := &jupyter.Collector{Servers: servers, Procs: jupyter.LiveProcs{}, Now: a.cfg.Now, Timeout: 10 * time.Second}
	es, _ := c.Collect(r.Context())
	var k *jupyter.Entry
	for i := range es {
		// a kernel its server lists first: processes no server lists
		// may name the same id (anyone can write a command line)
		if (es[i].KernelID == id || a.opaqueKernel(es[i].KernelID) == id) && (k == nil || k.ServerInfo() == nil) {
			k = &es[i]
		}
	}
	switch caller, lim := limited(r); {
	case k == nil:
		writeErr(w, http.StatusNotFound, "no kernel %s on this machine", id)
		return
	case lim && !caller.owns(k.UID):
		writeErr(w, http.StatusForbidden, "kernel %s belongs to %s: only its owner, root or the admin group may %s it", id, k.User, action)
		return
	case k.ServerInfo() == nil:
		writeErr(w, http.StatusConflict, "kernel %s: no Jupyter server lists it, so none can %s it", id, action)
		return
	}
	timeout := 10 * time.Second
	if action == "restart" {
		timeout = time.Minute // the server answers once the new kernel runs
	}
	if err := jupyter.Act(r.Context(), k, action, timeout); err != nil {
		writeErr(w, http.StatusBadGateway, "%s kernel %s: %v", action, id, err)
		return
	}
	by := "a token holder"
	if caller, ok := callerOf(r); ok {
		by = "uid " + strconv.Itoa(caller.uid)
	}
	a.log.Info("kernel "+past, "kernel", id, "owner", k.User, "by", by)
	writeJSON(w, http.StatusOK, map[string]any{"kernel_id": id, "action": action, "done": true})
}
