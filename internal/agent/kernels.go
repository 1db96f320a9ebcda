package agent

import (
	"net/http"

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
				es[i] = redactKernel(e)
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"kernels": es})
}

// redactKernel is another user's kernel as a user sees it: its owner,
// process, memory and whether it is an idle holder (as top flags another
// user's idle job); no notebook, server, session or run.
func redactKernel(e jupyter.Entry) jupyter.Entry {
	return jupyter.Entry{Notebook: hiddenName, KernelID: e.KernelID, PID: e.PID, PIDs: e.PIDs, UID: e.UID, User: e.User,
		GPUBytes: e.GPUBytes, AllocatedBytes: e.AllocatedBytes, ReservedBytes: e.ReservedBytes, RSSBytes: e.RSSBytes,
		ExecutionState: e.ExecutionState, IdleS: e.IdleS, Idle: e.Idle}
}
