package runctl

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Hints tells attribution which PIDs are the jobs of supervised runs and
// which notebook a kernel serves, reading the run store in home at most
// every few seconds, and names kernels by their connection files. It
// implements attrib.OwnerHints, attrib.NotebookHints and
// attrib.KernelHints.
type Hints struct {
	home    string
	st      *store.Store // the caller's open store, or nil: open home's for each read
	getenv  func(string) string
	mu      sync.Mutex
	loaded  time.Time
	byPID   map[int]*store.Run
	byID    map[string]*store.Run
	refresh time.Duration

	runningAt time.Time
	running   []timeline.RunState

	nbLoaded  time.Time
	notebooks map[string]jupyter.OwnedNotebook // kernel id -> notebook and owner

	conns map[string]string // absolute connection file -> kernel id

	envRuns map[int]string // job PID -> run id from its environment ("": none)

	// owner is the UID whose runs the store holds (the store is in this
	// process's user's state directory): a claim to one of them by a
	// process of another UID is refused.
	owner int
	// claims binds a run id no store here records to the UID of the first
	// job seen claiming it, for the hints' life: another UID's later claim
	// to the same id is refused.
	claims map[string]int
}

var (
	_ attrib.OwnerHints    = (*Hints)(nil)
	_ attrib.NotebookHints = (*Hints)(nil)
	_ attrib.KernelHints   = (*Hints)(nil)
	_ attrib.KernelOwners  = (*Hints)(nil)
)

// maxConns bounds the connection files KernelForConnection remembers.
const maxConns = 1024

// KernelForConnection implements attrib.KernelHints: the kernel id of a
// connection file whose name does not say it, as jupyter.KernelID derives
// it from the file's absolute path and key (the id run --kernel records
// and `vramguard kernels` shows). A relative path is the kernel's
// (/proc/PID/cwd). ok is false when the file does not read as a connection
// file. Each file is read once while it is remembered.
func (h *Hints) KernelForConnection(pid int, file string) (string, bool) {
	if !filepath.IsAbs(file) {
		cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		if err != nil {
			return "", false
		}
		file = filepath.Join(cwd, file)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if id, ok := h.conns[file]; ok {
		return id, true
	}
	// the file must be the process's user's: a process naming another
	// user's connection file (as root reads it) is not that kernel
	if owner, ok := (jupyter.LiveProcs{}).FileOwner(pid, file); ok {
		if st, err := (procfs.FS{}).Status(pid); err != nil || st.UID != owner {
			return "", false
		}
	}
	conn, err := jupyter.ReadConnection(file)
	if err != nil {
		return "", false
	}
	if h.conns == nil || len(h.conns) >= maxConns {
		h.conns = map[string]string{}
	}
	id := jupyter.KernelID(file, &conn)
	h.conns[file] = id
	return id, true
}

// NewHints returns hints backed by the run store in home; getenv finds
// Jupyter's runtime directories (nil: os.Getenv).
func NewHints(home string, getenv func(string) string) *Hints {
	if getenv == nil {
		getenv = os.Getenv
	}
	return &Hints{home: home, getenv: getenv, refresh: 3 * time.Second, owner: os.Geteuid(), claims: map[string]int{}}
}

// NewStoreHints is NewHints over a store the caller keeps open (a daemon's),
// so that reading it every second costs no open.
func NewStoreHints(st *store.Store, home string, getenv func(string) string) *Hints {
	h := NewHints(home, getenv)
	h.st = st
	return h
}

// open returns the store to read and how to let it go; ok is false when
// there is none to read (no state directory yet: nothing runs).
func (h *Hints) open() (st *store.Store, done func(), ok bool) {
	if h.st != nil {
		return h.st, func() {}, true
	}
	st, err := store.OpenExisting(h.home)
	if err != nil {
		return nil, nil, false
	}
	return st, func() { st.Close() }, true
}

// RunForPID implements attrib.OwnerHints.
func (h *Hints) RunForPID(pid int) (string, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.loaded) > h.refresh {
		h.load()
	}
	r, ok := h.byPID[pid]
	if ok && h.isJobOf(pid, r) {
		return r.ID, r.Name, true
	}
	if id, ok := h.runFromEnv(pid); ok {
		return id, "", true
	}
	return "", "", false
}

// isJobOf reports whether pid is really the job of r, a running run of the
// store: the kernel's process table, not the record alone, says so. The
// run's supervisor is alive (PID and start time as recorded) and pid is
// its child or grandchild (the job below the shim), so a PID reused after
// the job ended, by anyone, is no run.
func (h *Hints) isJobOf(pid int, r *store.Run) bool {
	fs := procfs.FS{}
	if !Alive(fs, r.SupervisorPID, r.SupervisorStart) {
		return false
	}
	a := pid
	for range 2 {
		p, err := fs.Proc(a)
		if err != nil {
			return false
		}
		if p.PPID == r.SupervisorPID {
			return true
		}
		a = p.PPID
	}
	return false
}

// ShimCommand is the hidden subcommand of the vramguard binary that starts
// a supervised job (package supervise runs it).
const ShimCommand = "__shim"

// runFromEnv finds the run of a job that no store read here records: one
// another user's vramguard supervises, seen by a machine-wide agent. Its
// parent is a vramguard shim of the job's own user, and its environment
// names the run (VRAMGUARD_RUN_ID, which the supervisor sets).
//
// The environment is the job's word, which any user can set to any id, so
// a claim stands only for the claimant's own runs: the run belongs to the
// UID of the process that claims it (the kernel's record, /proc/PID/status),
// and a claim is refused when the id is one the store here records (the
// store's user's runs) and the claimant is another user, or when a job of
// another UID claimed the id first. Each PID is read once between two
// loads of the store.
func (h *Hints) runFromEnv(pid int) (string, bool) {
	if id, ok := h.envRuns[pid]; ok {
		return id, id != ""
	}
	var id string
	fs := procfs.FS{}
	if p, err := fs.Proc(pid); err == nil {
		st, serr := fs.Status(pid)
		sh, sherr := fs.Status(p.PPID)
		if argv, err := fs.Cmdline(p.PPID); err == nil && slices.Contains(argv, ShimCommand) && serr == nil && sherr == nil && st.UID == sh.UID {
			if env, err := fs.Environ(pid); err == nil {
				for _, kv := range env {
					if v, ok := strings.CutPrefix(kv, "VRAMGUARD_RUN_ID="); ok {
						id = v
					}
				}
			}
			if id != "" && !h.mayClaim(id, st.UID) {
				id = ""
			}
		}
	}
	if h.envRuns == nil {
		h.envRuns = map[int]string{}
	}
	h.envRuns[pid] = id
	return id, id != ""
}

// mayClaim reports whether a job of uid may be taken as the job of run id
// (see runFromEnv), and binds id to uid when it is the first claim.
func (h *Hints) mayClaim(id string, uid int) bool {
	if h.recorded(id) && uid != h.owner {
		return false
	}
	if u, ok := h.claims[id]; ok {
		return u == uid
	}
	if h.claims == nil {
		h.claims = map[string]int{}
	}
	if len(h.claims) >= maxClaims {
		clear(h.claims)
	}
	h.claims[id] = uid
	return true
}

// maxClaims bounds the run ids mayClaim remembers.
const maxClaims = 4096

// recorded reports whether the store here records a run with id (any
// status): a run of the store's user.
func (h *Hints) recorded(id string) bool {
	if _, ok := h.byID[id]; ok {
		return true
	}
	st, done, ok := h.open()
	if !ok {
		return false
	}
	defer done()
	r, err := st.Resolve(context.Background(), id)
	return err == nil && r.ID == id
}

// NotebookForKernel implements attrib.NotebookHints: the notebook a kernel
// serves, from vramguard's record of supervised kernels and from the
// sessions of the Jupyter servers running on this machine (asked at most
// every 10 s, each answer bounded to one second).
func (h *Hints) NotebookForKernel(kernelID string) (string, bool) {
	nb, ok := h.kernel(kernelID)
	return nb.Path, ok && nb.Path != ""
}

// KernelOwner implements attrib.KernelOwners: the UID a kernel belongs to,
// its server's user (or the store's user for a kernel run --kernel
// recorded here), read with the notebooks; users.NoUID when processes of
// two users name it.
func (h *Hints) KernelOwner(kernelID string) (int, bool) {
	nb, ok := h.kernel(kernelID)
	return nb.UID, ok
}

// kernel is what is known of kernelID's notebook, from notebooks read at
// most 10 s ago (read again when older).
func (h *Hints) kernel(kernelID string) (jupyter.OwnedNotebook, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.nbLoaded) > 10*time.Second {
		h.loadNotebooks()
	}
	nb, ok := h.notebooks[kernelID]
	return nb, ok
}

func (h *Hints) loadNotebooks() {
	h.nbLoaded = time.Now()
	nbs := map[string]jupyter.OwnedNotebook{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if st, done, ok := h.open(); ok {
		if ks, err := st.Kernels(ctx); err == nil {
			for _, k := range ks {
				if k.Notebook != "" {
					nbs[k.KernelID] = jupyter.OwnedNotebook{Path: k.Notebook, UID: h.owner}
				}
			}
		}
		done()
	}
	home, _ := os.UserHomeDir()
	if servers, err := jupyter.Discover(jupyter.RuntimeDirs(h.getenv, home, os.Geteuid() == 0)); err == nil && len(servers) > 0 {
		for id, nb := range jupyter.Notebooks(ctx, servers, jupyter.LiveProcs{}, time.Second) {
			nbs[id] = nb
		}
	}
	h.notebooks = nbs
}

func (h *Hints) load() {
	h.loaded = time.Now()
	clear(h.envRuns) // a PID seen before may be another process now
	ctx := context.Background()
	st, done, ok := h.open()
	if !ok {
		return
	}
	defer done()
	runs, err := st.Runs(ctx, 200)
	if err != nil {
		return
	}
	h.byPID = map[int]*store.Run{}
	h.byID = map[string]*store.Run{}
	for _, r := range runs {
		h.byID[r.ID] = r
		if r.Status == store.StatusRunning && r.JobPID > 0 {
			h.byPID[r.JobPID] = r
		}
	}
}
