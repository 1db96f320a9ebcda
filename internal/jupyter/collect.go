package jupyter

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/users"
)

// OpaqueKernelPrefix begins the id a shared agent shows a user for another
// user's kernel.
const OpaqueKernelPrefix = "kernel:"

// Entry is one kernel as `vramguard kernels` shows it: which notebook it
// serves, its process, its memory and its activity.
type Entry struct {
	// Notebook is the notebook's absolute path when the server's root is
	// known, else the path as the server gives it; "" for a kernel without
	// a session (a console, or one started through /api/kernels).
	Notebook string `json:"notebook"`
	Path     string `json:"path"`
	// KernelID is Jupyter's id of the kernel; over a shared agent's socket
	// another user's kernel has an opaque one instead (OpaqueKernelPrefix),
	// which the agent's kernel actions take back.
	KernelID   string `json:"kernel_id"`
	KernelName string `json:"kernel_name"`
	SessionID  string `json:"session_id,omitempty"`
	Server     string `json:"server"`
	// PID is the kernel process (host PID); 0 when it was not found (a
	// kernel on another machine, or starting).
	PID          int   `json:"pid"`
	ContainerPID int   `json:"container_pid,omitempty"`
	PIDs         []int `json:"pids"`
	// UID and User are the kernel process's owner and its login name (the
	// number where the passwd database has none); a kernel whose process
	// was not found is owned by users.Unknown (UID users.NoUID).
	UID  int    `json:"uid"`
	User string `json:"user"`
	// GPUBytes is the driver's figure for the kernel and its workers.
	GPUBytes uint64 `json:"gpu_bytes"`
	// AllocatedBytes and ReservedBytes are PyTorch's own figures when the
	// probe reports them.
	AllocatedBytes *uint64 `json:"allocated_bytes,omitempty"`
	ReservedBytes  *uint64 `json:"reserved_bytes,omitempty"`
	RSSBytes       uint64  `json:"rss_bytes"`
	// ExecutionState is the server's; "unknown" for a kernel no server
	// listed.
	ExecutionState string    `json:"execution_state"`
	LastActivity   time.Time `json:"last_activity"`
	IdleS          float64   `json:"idle_s"`
	// Idle reports an idle holder: the server says the kernel is idle, it
	// has been since LastActivity for at least the collector's IdleWindow,
	// and it holds GPU memory (see IdleHolder).
	Idle        bool `json:"idle"`
	Connections int  `json:"connections"`
	Supervised  bool `json:"supervised"`
	// RunID is the vramguard run that supervises the kernel, when known.
	RunID string `json:"run_id,omitempty"`

	server *Server
}

// Server is the server the entry came from (for actions).
func (e *Entry) ServerInfo() *Server { return e.server }

// Collector joins what the servers say with what /proc and the GPU say.
type Collector struct {
	Servers []Server
	Procs   ProcSource
	// Jobs are the GPU-holding process trees from attrib; a kernel is
	// charged every job rooted at it or at one of its descendants.
	Jobs    []attrib.Job
	Now     func() time.Time
	Timeout time.Duration
	// Users names the kernels' owners (nil: the machine's passwd database).
	Users attrib.UserNames
	// IdleWindow is how long a kernel Jupyter calls idle must have been so
	// to be an idle holder (0: DefaultIdleWindow).
	IdleWindow time.Duration
	// Scope, when set, limits the kernels no server listed to those whose
	// connection file is in one of these directories (the runtime
	// directories a user named); nil shows every such kernel.
	Scope []string
}

// inScope reports whether a kernel no server listed is shown: no scope,
// or its connection file is in a scoped directory.
func (c *Collector) inScope(kp KernelProc) bool {
	if c.Scope == nil {
		return true
	}
	for _, d := range c.Scope {
		if kp.ConnFile != "" && filepath.Dir(kp.ConnFile) == filepath.Clean(d) {
			return true
		}
	}
	return false
}

// DefaultIdleWindow is the idle window of a kernel, as the agent's idle
// policy's default for a job.
const DefaultIdleWindow = 30 * time.Minute

// IdleHolder reports whether e is an idle holder under window: Jupyter
// says it is idle, its last activity is window or more ago, and it holds
// GPU memory. A kernel no server lists (state unknown) never is.
func (e *Entry) IdleHolder(window time.Duration) bool {
	return e.ExecutionState == "idle" && !e.LastActivity.IsZero() && e.GPUBytes > 0 && e.IdleS >= window.Seconds()
}

// Collect lists the kernels of every server. A server that does not answer
// is reported in the error while the others are still listed.
func (c *Collector) Collect(ctx context.Context) ([]Entry, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	procs, err := KernelProcs(c.Procs)
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	var out []Entry
	var errs []error
	for i := range c.Servers {
		s := &c.Servers[i]
		cl := NewClient(*s, timeout)
		kernels, err := cl.Kernels(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sessions, err := cl.Sessions(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		byKernel := map[string]Session{}
		for _, se := range sessions {
			byKernel[se.Kernel.ID] = se
		}
		// A kernel belongs to its server's user: only a process of that
		// user is taken as the kernel the server lists.
		serverUID, serverKnown := users.NoUID, false
		if s.PID > 0 {
			if st, err := c.Procs.Status(s.PID); err == nil {
				serverUID, serverKnown = st.UID, true
			}
		}
		for _, k := range kernels {
			e := Entry{KernelID: k.ID, KernelName: k.Name, ExecutionState: k.ExecutionState,
				LastActivity: k.LastActivity, Connections: k.Connections, Server: cl.Endpoint(""), server: s, PIDs: []int{},
				UID: users.NoUID, User: users.Unknown}
			if !k.LastActivity.IsZero() {
				e.IdleS = max(0, now().Sub(k.LastActivity).Seconds())
			}
			if se, ok := byKernel[k.ID]; ok {
				e.SessionID, e.Path = se.ID, se.Path
				e.Notebook = se.Path
				if s.RootDir != "" && !filepath.IsAbs(se.Path) {
					e.Notebook = filepath.Join(s.RootDir, se.Path)
				}
			}
			if kp, ok := procs[k.ID]; ok {
				if !serverKnown {
					c.fill(&e, kp)
				} else if own, ok := kp.Of(serverUID); ok {
					c.fill(&e, own)
				} else {
					e.UID, e.User = serverUID, c.names().Name(serverUID)
				}
			} else if serverKnown {
				e.UID, e.User = serverUID, c.names().Name(serverUID)
			}
			out = append(out, e)
		}
	}
	// Kernels no server listed (a server whose runtime file this user cannot
	// read, one in a container, or a kernel that outlived its server) are
	// still shown, with the notebook from their own environment.
	listed := map[string]bool{}
	for _, e := range out {
		listed[e.KernelID] = true
	}
	envSrc, _ := c.Procs.(EnvSource)
	for id, kp := range procs {
		if listed[id] {
			continue
		}
		// each owner's process is its own entry (none is the other's)
		for _, p := range append([]KernelProc{kp}, kp.Others...) {
			if !c.inScope(p) {
				continue
			}
			e := Entry{KernelID: id, ExecutionState: "unknown", PIDs: []int{}, UID: users.NoUID, User: users.Unknown}
			c.fill(&e, p)
			if envSrc != nil {
				e.Notebook = ProcNotebook(envSrc, p.PID)
			}
			out = append(out, e)
		}
	}
	window := c.IdleWindow
	if window <= 0 {
		window = DefaultIdleWindow
	}
	for i := range out {
		out[i].Idle = out[i].IdleHolder(window)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].GPUBytes != out[j].GPUBytes {
			return out[i].GPUBytes > out[j].GPUBytes
		}
		if out[i].Notebook != out[j].Notebook {
			return out[i].Notebook < out[j].Notebook
		}
		return out[i].KernelID < out[j].KernelID
	})
	if out == nil {
		out = []Entry{}
	}
	return out, errors.Join(errs...)
}

// fill sets what the process table and the GPU say of a kernel.
func (c *Collector) fill(e *Entry, kp KernelProc) {
	e.PID, e.ContainerPID, e.Supervised, e.RunID = kp.PID, kp.ContainerPID, kp.Supervised, kp.RunID
	e.RSSBytes = kp.RSS()
	e.UID = kp.UID
	e.User = c.names().Name(kp.UID)
	in := map[int]bool{}
	for _, p := range kp.Tree {
		in[p.PID] = true
		e.PIDs = append(e.PIDs, p.PID)
	}
	for _, j := range c.Jobs {
		if !in[j.RootPID] {
			continue
		}
		e.GPUBytes += j.GPUBytes
		if j.AllocatedBytes != nil {
			if e.AllocatedBytes == nil {
				e.AllocatedBytes, e.ReservedBytes = new(uint64), new(uint64)
			}
			*e.AllocatedBytes += *j.AllocatedBytes
			*e.ReservedBytes += *j.ReservedBytes
		}
	}
}

// names is the collector's user names (the machine's passwd database by
// default).
func (c *Collector) names() attrib.UserNames {
	if c.Users != nil {
		return c.Users
	}
	return users.System()
}

// Act sends one action (interrupt, restart or shutdown) for e to its server.
func Act(ctx context.Context, e *Entry, action string, timeout time.Duration) error {
	if e.server == nil {
		return fmt.Errorf("kernel %s: no server known", e.KernelID)
	}
	cl := NewClient(*e.server, timeout)
	switch action {
	case "interrupt":
		return cl.Interrupt(ctx, e.KernelID)
	case "restart":
		return cl.Restart(ctx, e.KernelID)
	case "shutdown":
		return cl.Shutdown(ctx, e.SessionID, e.KernelID)
	}
	return fmt.Errorf("unknown action %q", action)
}

// Notebooks maps kernel ids to notebook paths for callers that group
// processes by notebook (top, serve): the servers' sessions first, then the
// environment of kernel processes no server lists. It never fails; what
// cannot be read is left out.
//
// Each notebook comes with the kernel's owner (its server's user, or its
// process's for a kernel no server lists; users.NoUID when unknown), so a
// caller names a kernel's notebook only for a process of that user.
func Notebooks(ctx context.Context, servers []Server, src ProcSource, timeout time.Duration) map[string]OwnedNotebook {
	c := &Collector{Servers: servers, Procs: src, Timeout: timeout}
	es, _ := c.Collect(ctx)
	out := make(map[string]OwnedNotebook, len(es))
	for _, e := range es {
		if e.Notebook != "" {
			if prev, ok := out[e.KernelID]; ok && prev.UID != e.UID {
				// two owners name one kernel: neither is told its notebook
				out[e.KernelID] = OwnedNotebook{UID: users.NoUID}
				continue
			}
			out[e.KernelID] = OwnedNotebook{Path: e.Notebook, UID: e.UID}
		}
	}
	return out
}

// OwnedNotebook is a kernel's notebook and the kernel's owner.
type OwnedNotebook struct {
	Path string
	UID  int
}
