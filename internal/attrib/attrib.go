// Package attrib says who owns GPU memory. The driver reports host PIDs;
// attrib maps them to processes in /proc (rooted at a configurable path, so
// golden tests run on fixture trees), derives each process's container, pod,
// SLURM job, systemd unit or notebook kernel from its cgroup and command
// line, and rolls process trees up into jobs so that DataLoader workers count
// toward the job that spawned them while still being listed one by one. It
// also finds GPU memory held by processes whose job is gone (orphans) or
// whose PID no longer exists (vanished). It only reads; it never signals.
package attrib

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/users"
)

// ProcSource is where processes are read from. procfs.FS is the real one;
// the simulator overlays its scenario's processes on it.
type ProcSource interface {
	All() ([]procfs.Proc, error)
	Status(pid int) (procfs.Status, error)
	Cgroups(pid int) ([]procfs.CgroupEntry, error)
	Cmdline(pid int) ([]string, error)
}

// Simulator is implemented by a ProcSource that makes some processes up;
// they are marked so nobody tries to signal them.
type Simulator interface {
	Simulated(pid int) bool
}

// OwnerHints tells attribution which processes are the roots of runs that
// vramguard supervises (recorded by the supervisor). A nil OwnerHints is
// allowed and knows nothing.
type OwnerHints interface {
	RunForPID(pid int) (runID, name string, ok bool)
}

// NotebookHints is optionally implemented by an OwnerHints that knows which
// notebook a Jupyter kernel serves (from the Jupyter servers' sessions, or
// from vramguard's record of supervised kernels).
type NotebookHints interface {
	NotebookForKernel(kernelID string) (path string, ok bool)
}

// KernelHints is optionally implemented by an OwnerHints that names the
// kernel of a connection file whose name does not say it (nbclient's and a
// bare KernelManager's temporary files, an editor's) as `vramguard run
// --kernel` and `vramguard kernels` name it: from the file's path and the
// key inside it. pid is the kernel's process, for a relative path.
type KernelHints interface {
	KernelForConnection(pid int, file string) (kernelID string, ok bool)
}

// KernelOwners is optionally implemented by an OwnerHints that knows whose
// each kernel is (its Jupyter server's user): a process of another user
// whose command line names the kernel is not taken as it.
type KernelOwners interface {
	KernelOwner(kernelID string) (uid int, ok bool)
}

// UserNames turns a UID into a login name (users.DB is the real one); a UID
// without a name is its number.
type UserNames interface {
	Name(uid int) string
}

// UserNamer is optionally implemented by a ProcSource that makes owners up
// (the simulator's scenario names them).
type UserNamer interface {
	UserName(uid int) (string, bool)
}

// Job kinds, in the order top groups them.
const (
	KindRun       = "run"
	KindNotebook  = "notebook"
	KindPod       = "pod"
	KindContainer = "container"
	KindSlurm     = "slurm"
	KindService   = "service"
	KindProcess   = "process"
)

// KindOrder ranks kinds for grouping.
var KindOrder = map[string]int{KindRun: 0, KindNotebook: 1, KindPod: 2, KindContainer: 3, KindSlurm: 4, KindService: 5, KindProcess: 6}

// Process is one process of a job.
type Process struct {
	PID  int `json:"pid"`
	PPID int `json:"ppid"`
	// NSpid is the PID in each PID namespace, host first; set only when the
	// process lives in a nested namespace. ContainerPID is the innermost.
	NSpid        []int    `json:"nspid,omitempty"`
	ContainerPID int      `json:"container_pid,omitempty"`
	Comm         string   `json:"comm"`
	Cmdline      []string `json:"cmdline,omitempty"`
	UID          int      `json:"uid"`
	// User is UID's login name (its number when the passwd database does
	// not name it).
	User string `json:"user"`
	// Role is "main" for the job's root, "gpu" for another process holding
	// GPU memory, "worker" for the rest (DataLoader workers, helpers).
	Role     string `json:"role"`
	RSSBytes uint64 `json:"rss_bytes"`
	GPUBytes uint64 `json:"gpu_bytes"`
	// GPU lists the process's records from the driver, one per device.
	GPU        []gpu.Process `json:"gpu,omitempty"`
	StartTicks uint64        `json:"start_ticks"`
	Simulated  bool          `json:"simulated,omitempty"`
	// Rank, LocalRank and WorldSize are the process's place in a
	// distributed job as its environment names it (RANK/LOCAL_RANK/
	// WORLD_SIZE, Slurm's, MPI's variables), Node the node it names
	// (VRAMGUARD_NODE, SLURMD_NODENAME) and Group the job across nodes
	// (VRAMGUARD_GROUP, SLURM_JOB_ID, TORCHELASTIC_RUN_ID); the sampler
	// sets them for the processes of jobs. Nil and "": not named (or not
	// readable). A DataLoader worker inherits its rank's.
	Rank      *int   `json:"rank,omitempty"`
	LocalRank *int   `json:"local_rank,omitempty"`
	WorldSize *int   `json:"world_size,omitempty"`
	Node      string `json:"node,omitempty"`
	Group     string `json:"group,omitempty"`
	// RankFrom says which variable named the rank (ranks.Source*).
	RankFrom string `json:"rank_from,omitempty"`
	// MemRequest is the host memory its Slurm job asked for on this node
	// (ranks.Place.MemRequest; 0: none asked).
	MemRequest uint64 `json:"mem_request_bytes,omitempty"`
}

// Job is a process tree that holds GPU memory, with its owner.
type Job struct {
	// Key identifies the job across samples: run:<id>, notebook:<kernel>,
	// or pid:<root>:<start ticks>.
	Key  string `json:"key"`
	Kind string `json:"kind"`
	// Name is a short human label: run name, pod/container id, command.
	Name    string `json:"name"`
	RootPID int    `json:"root_pid"`
	// UID and User are the owner of the job's root process (its real UID,
	// as /proc/PID/status gives it) and its login name, or the number when
	// the passwd database does not name it.
	UID    int    `json:"uid"`
	User   string `json:"user"`
	RunID  string `json:"run_id,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	// Notebook is the notebook a kernel job serves, when known.
	Notebook string  `json:"notebook,omitempty"`
	Context  Context `json:"context"`
	// Devices are the indexes of the GPUs the job holds memory on.
	Devices       []int  `json:"devices"`
	GPUBytes      uint64 `json:"gpu_bytes"`
	RSSBytes      uint64 `json:"rss_bytes"`
	SMUtilPercent int    `json:"sm_util_percent"`
	// AllocatedBytes and ReservedBytes are PyTorch's own figures from the
	// probe (summed over the job); attribution leaves them nil and the
	// sampler fills them from its probe source.
	AllocatedBytes *uint64 `json:"allocated_bytes,omitempty"`
	ReservedBytes  *uint64 `json:"reserved_bytes,omitempty"`
	// Orphan is set when the job's parent is gone while it still holds GPU
	// memory; OrphanReason says how that was seen.
	Orphan       bool   `json:"orphan,omitempty"`
	OrphanReason string `json:"orphan_reason,omitempty"`
	// Flags are verdicts added by later analysis (leak, OOM risk); attrib
	// itself never sets them.
	Flags     []string  `json:"flags,omitempty"`
	Processes []Process `json:"processes"`
}

// Result is one attribution of a process list.
type Result struct {
	Jobs []Job `json:"jobs"`
	// Vanished are GPU records whose PID is not in /proc: memory held by a
	// process that no longer exists (or lives in a PID namespace this /proc
	// cannot see). They are never shown as real processes.
	Vanished      []gpu.Process `json:"vanished"`
	VanishedBytes uint64        `json:"vanished_bytes"`
	// Scanned is how many processes /proc listed.
	Scanned int `json:"scanned"`
}

// Attributor turns GPU process records into jobs. It remembers what does not
// change during a process's life (its command line, cgroups, UID and PID
// namespaces) from one pass to the next, keyed by PID and start time, so a
// sampler calling it every second reads only /proc/<pid>/stat for processes
// it has seen before. Attribute must not be called concurrently.
type Attributor struct {
	Src   ProcSource
	Hints OwnerHints
	// Pods names the namespace and pod of a pod's UID (nil: pods are known
	// by UID alone).
	Pods *PodIndex
	// Users names UIDs (nil: the passwd database of Src's root, the
	// machine's for the live /proc). A Src that
	// implements UserNamer names its made-up owners first.
	Users UserNames

	seen map[procKey]*info

	// Scratch kept from pass to pass so that a pass over an unchanged
	// process table allocates little beyond its result.
	spare  map[procKey]*info
	procs  map[int]*info
	edges  []edge
	kidPID []int
	roots  map[int]bool
	order  []int
	devs   []int
	jobs   []Job
	rank   []jobRank
	all    []procfs.Proc
	// table keeps the live /proc between passes (Src is procfs.FS{}): only
	// the stat of processes a pass uses is read (see procfs.Table).
	table *procfs.Table
}

// userName names uid: the source's made-up owners first, then Users.
// UserName is uid's login name as attribution names processes' owners
// (its number where none is known).
func (a *Attributor) UserName(uid int) string { return a.userName(uid) }

func (a *Attributor) userName(uid int) string {
	if n, ok := a.Src.(UserNamer); ok {
		if name, ok := n.UserName(uid); ok {
			return name
		}
	}
	if a.Users == nil {
		// a fixture tree's owners are named by its own etc/passwd
		if fs, ok := a.Src.(procfs.FS); ok && fs.Root != "" {
			a.Users = &users.DB{Root: fs.Root}
		} else {
			a.Users = users.System()
		}
	}
	return a.Users.Name(uid)
}

// Close releases the files the Attributor keeps open between passes. It
// may be used again afterwards.
func (a *Attributor) Close() {
	if a.table != nil {
		a.table.Close()
	}
}

// scan lists the processes: through the table for the live /proc, so that
// info.stale marks those whose stat was not read in this pass.
func (a *Attributor) scan() ([]procfs.Proc, bool, error) {
	if fs, ok := a.Src.(procfs.FS); ok && fs.Root == "" {
		if a.table == nil {
			a.table = procfs.NewTable(fs)
			runtime.AddCleanup(a, func(t *procfs.Table) { t.Close() }, a.table)
		}
		all, err := a.table.Scan(a.all[:0])
		a.all = all
		return all, true, err
	}
	if ap, ok := a.Src.(appendAller); ok {
		all, err := ap.AppendAll(a.all[:0])
		a.all = all
		return all, false, err
	}
	all, err := a.Src.All()
	return all, false, err
}

// appendAller is a ProcSource that can scan into a reused slice
// (procfs.FS).
type appendAller interface {
	AppendAll(dst []procfs.Proc) ([]procfs.Proc, error)
}

// edge is a parent and one of its children.
type edge struct{ ppid, pid int }

// procKey identifies a process across PID reuse.
type procKey struct {
	pid   int
	start uint64
}

// info is what is known of one process during a pass.
type info struct {
	p       procfs.Proc
	status  *procfs.Status
	cgroups *Context
	argv    []string
	argvOK  bool
	// stale is set when p is from an earlier pass (its place in the tree
	// is current; the rest is read when the pass uses it: pass.use).
	stale bool
	// key is the job key "pid:<pid>:<start>" when this process is a root;
	// name the job name derived from nameComm and argv.
	key      string
	name     string
	nameComm string
	nameOK   bool
}

type pass struct {
	a     *Attributor
	procs map[int]*info
	// gpu holds the driver's records of live processes sorted by PID (in
	// the driver's order within a PID); jobs' processes share it.
	gpu []gpu.Process
	// slab and devSlab are the backing of the jobs' Processes and Devices.
	slab    []Process
	devSlab []int
}

// use makes in.p current: a process whose stat the scan did not read is
// read now. If it has exited since the scan, the last reading stands.
func (ps *pass) use(in *info) *info {
	if in.stale {
		in.stale = false
		if p, err := ps.a.table.Restat(in.p.PID); err == nil && p.StartTicks == in.p.StartTicks {
			in.p = p
		}
	}
	return in
}

// kids returns pid's children in ascending order of PID.
func (ps *pass) kids(pid int) []int {
	e := ps.a.edges
	lo, _ := slices.BinarySearchFunc(e, pid, func(x edge, pid int) int { return cmp.Compare(x.ppid, pid) })
	hi := lo
	for hi < len(e) && e[hi].ppid == pid {
		hi++
	}
	return ps.a.kidPID[lo:hi]
}

// onGPU returns the driver's records of pid.
func (ps *pass) onGPU(pid int) []gpu.Process {
	g := ps.gpu
	lo, _ := slices.BinarySearchFunc(g, pid, func(x gpu.Process, pid int) int { return cmp.Compare(x.PID, pid) })
	hi := lo
	for hi < len(g) && g[hi].PID == pid {
		hi++
	}
	if lo == hi {
		return nil
	}
	return g[lo:hi:hi]
}

func (ps *pass) ctx(pid int) Context {
	in := ps.procs[pid]
	if in.cgroups == nil {
		ents, _ := ps.a.Src.Cgroups(pid)
		c := ParseCgroup(ents)
		in.cgroups = &c
	}
	return *in.cgroups
}

func (ps *pass) cmdline(pid int) []string {
	in := ps.procs[pid]
	if !in.argvOK {
		in.argv, _ = ps.a.Src.Cmdline(pid)
		in.argvOK = true
	}
	return in.argv
}

func (ps *pass) status(pid int) procfs.Status {
	in := ps.procs[pid]
	if in.status == nil {
		s, err := ps.a.Src.Status(pid)
		if err != nil {
			s = procfs.Status{}
		}
		in.status = &s
	}
	return *in.status
}

func (a *Attributor) run(pid int) (string, string, bool) {
	if a.Hints == nil {
		return "", "", false
	}
	return a.Hints.RunForPID(pid)
}

// Attribute reads the process table once and groups gprocs into jobs.
func (a *Attributor) Attribute(gprocs []gpu.Process) (Result, error) {
	all, lazy, err := a.scan()
	if err != nil {
		return Result{}, fmt.Errorf("scan processes: %w", err)
	}
	if a.procs == nil {
		a.procs, a.roots = map[int]*info{}, map[int]bool{}
	}
	clear(a.procs)
	clear(a.roots)
	ps := &pass{a: a, procs: a.procs}
	// Processes are remembered from the last pass; those that exited are
	// forgotten, so the cache holds only the living.
	seen := a.spare
	if seen == nil {
		seen = make(map[procKey]*info, len(all))
	}
	clear(seen)
	a.edges = a.edges[:0]
	for _, p := range all {
		k := procKey{p.PID, p.StartTicks}
		in := a.seen[k]
		if in == nil {
			in = &info{}
		}
		in.p = p // stat (RSS, CPU, parent) is fresh every pass, or read when used
		in.stale = lazy && !a.table.Fresh(p.PID)
		seen[k] = in
		ps.procs[p.PID] = in
		a.edges = append(a.edges, edge{p.PPID, p.PID})
	}
	a.seen, a.spare = seen, a.seen
	slices.SortFunc(a.edges, func(x, y edge) int {
		if c := cmp.Compare(x.ppid, y.ppid); c != 0 {
			return c
		}
		return cmp.Compare(x.pid, y.pid)
	})
	a.kidPID = a.kidPID[:0]
	for _, e := range a.edges {
		a.kidPID = append(a.kidPID, e.pid)
	}

	res := Result{Jobs: []Job{}, Vanished: []gpu.Process{}, Scanned: len(all)}
	live := 0
	for _, g := range gprocs {
		if _, ok := ps.procs[g.PID]; ok {
			live++
		}
	}
	ps.gpu = make([]gpu.Process, 0, live)
	a.order = a.order[:0]
	for _, g := range gprocs {
		if _, ok := ps.procs[g.PID]; !ok {
			res.Vanished = append(res.Vanished, g)
			res.VanishedBytes += g.UsedBytes
			continue
		}
		ps.gpu = append(ps.gpu, g)
		r := ps.root(g.PID)
		if !a.roots[r] {
			a.roots[r] = true
			a.order = append(a.order, r)
		}
	}
	slices.SortStableFunc(ps.gpu, func(x, y gpu.Process) int { return cmp.Compare(x.PID, y.PID) })
	ps.slab = make([]Process, 0, len(ps.gpu))
	ps.devSlab = make([]int, 0, len(ps.gpu))
	// Jobs are built in the pass's scratch and placed in order, most GPU
	// memory first, then by root PID; sorting small keys instead of jobs
	// moves each job once.
	a.jobs = a.jobs[:0]
	a.rank = a.rank[:0]
	for i, r := range a.order {
		a.jobs = append(a.jobs, ps.job(r, a.roots))
		a.rank = append(a.rank, jobRank{a.jobs[i].GPUBytes, r, i})
	}
	unshareKeys(a.jobs)
	slices.SortFunc(a.rank, func(x, y jobRank) int {
		if x.gpu != y.gpu {
			return cmp.Compare(y.gpu, x.gpu)
		}
		return cmp.Compare(x.root, y.root)
	})
	if len(a.rank) > 0 {
		res.Jobs = make([]Job, len(a.rank))
		for i, k := range a.rank {
			res.Jobs[i] = a.jobs[k.i]
		}
	}
	clear(a.jobs) // keep no reference to this pass's result
	return res, nil
}

// unshareKeys keeps a key to one owner: jobs of different UIDs that claim
// one run or kernel key (an id a job's own environment or command line
// names, which any user can write) are each keyed by their own process
// instead (pid:PID:START), and lose the run and kernel they claimed, so
// no claim merges one user's job into another's.
func unshareKeys(jobs []Job) {
	owner := make(map[string]int, len(jobs))
	shared := map[string]bool{}
	for _, j := range jobs {
		if u, ok := owner[j.Key]; ok && u != j.UID {
			shared[j.Key] = true
		}
		owner[j.Key] = j.UID
	}
	for i := range jobs {
		j := &jobs[i]
		if !shared[j.Key] {
			continue
		}
		var ticks uint64
		if len(j.Processes) > 0 {
			ticks = j.Processes[0].StartTicks
			j.Name = commandName(j.Processes[0].Comm, j.Processes[0].Cmdline)
		}
		j.Key = "pid:" + strconv.Itoa(j.RootPID) + ":" + strconv.FormatUint(ticks, 10)
		j.Kind, j.RunID, j.Kernel, j.Notebook = KindProcess, "", "", ""
	}
}

// jobRank is the sort key of a job: GPU bytes, root PID, and where it is.
type jobRank struct {
	gpu  uint64
	root int
	i    int
}

// launchers start the processes of one job; they count as its root.
var launchers = map[string]bool{
	"torchrun": true, "accelerate": true, "deepspeed": true, "mpirun": true,
	"mpiexec": true, "horovodrun": true, "lightning": true, "python": true,
}

// boundaries are never part of a job: shells, session and service managers,
// container shims and SLURM's step daemon.
var boundaries = map[string]bool{
	"bash": true, "sh": true, "dash": true, "zsh": true, "fish": true, "tmux": true,
	"screen": true, "sshd": true, "systemd": true, "init": true, "containerd-shim": true,
	"containerd-shim-runc-v2": true, "conmon": true, "slurmstepd": true, "tini": true,
	"dumb-init": true, "docker-init": true, "runc": true, "crun": true, "su": true,
	"sudo": true, "login": true, "vramguard": true, "catatonit": true,
}

// program normalises a comm for comparison: python3.11 and python are one
// program, and PyTorch's renamed threads (pt_main_thread, pt_data_worker)
// are python.
func program(comm string) string {
	if strings.HasPrefix(comm, "pt_") {
		return "python"
	}
	return strings.TrimRight(comm, "0123456789.")
}

// root climbs from pid to the process its job is rooted at: a supervised
// run's root wherever it is among the ancestors; otherwise the highest
// ancestor running the same program (or a launcher such as torchrun) within
// the same container, pod, SLURM job or unit, stopping at shells, init and
// runtime shims, and at notebook kernels.
func (ps *pass) root(pid int) int {
	for cur := pid; cur > 0; {
		if _, _, ok := ps.a.run(cur); ok {
			return cur
		}
		in, ok := ps.procs[cur]
		if !ok {
			break
		}
		cur = in.p.PPID
	}
	cur := pid
	for {
		if _, _, ok := KernelID(ps.cmdline(cur)); ok {
			return cur
		}
		in := ps.use(ps.procs[cur])
		parent, ok := ps.procs[in.p.PPID]
		if !ok || parent.p.PID <= 1 {
			return cur
		}
		ps.use(parent)
		pc := program(parent.p.Comm)
		if boundaries[pc] || boundaries[parent.p.Comm] {
			return cur
		}
		if pc != program(in.p.Comm) && !launchers[pc] {
			return cur
		}
		if !sameScope(ps.ctx(parent.p.PID), ps.ctx(cur)) {
			return cur
		}
		if s := ps.status(cur).NSpid; len(s) > 1 && s[len(s)-1] == 1 {
			return cur // a container's init
		}
		cur = parent.p.PID
	}
}

// job builds the job rooted at r: r and its descendants, except subtrees
// rooted at another job's root.
func (ps *pass) job(r int, roots map[int]bool) Job {
	root := ps.procs[r]
	j := Job{RootPID: r, SMUtilPercent: -1}
	sim, _ := ps.a.Src.(Simulator)
	devs := ps.a.devs[:0]
	// The job's processes are appended to the pass's slab in breadth-first
	// order; the slab itself is the queue.
	start := len(ps.slab)
	ps.slab = append(ps.slab, Process{PID: r})
	for next := start; next < len(ps.slab); next++ {
		pid := ps.slab[next].PID
		in := ps.use(ps.procs[pid])
		st := ps.status(pid)
		p := Process{
			PID: pid, PPID: in.p.PPID, Comm: in.p.Comm, Cmdline: ps.cmdline(pid), UID: st.UID, User: ps.a.userName(st.UID),
			RSSBytes: in.p.RSSBytes, StartTicks: in.p.StartTicks, Role: "worker",
		}
		if len(st.NSpid) > 1 {
			p.NSpid, p.ContainerPID = st.NSpid, st.NSpid[len(st.NSpid)-1]
		}
		if sim != nil {
			p.Simulated = sim.Simulated(pid)
		}
		p.GPU = ps.onGPU(pid)
		for _, g := range p.GPU {
			p.GPUBytes += g.UsedBytes
			devs = append(devs, g.DeviceIndex)
			if g.SMUtilPercent >= 0 {
				j.SMUtilPercent = max(j.SMUtilPercent, 0) + g.SMUtilPercent
			}
		}
		if len(p.GPU) > 0 {
			p.Role = "gpu"
		}
		if pid == r {
			p.Role = "main"
		}
		j.GPUBytes += p.GPUBytes
		j.RSSBytes += p.RSSBytes
		ps.slab[next] = p
		for _, k := range ps.kids(pid) {
			if !roots[k] {
				ps.slab = append(ps.slab, Process{PID: k})
			}
		}
	}
	end := len(ps.slab)
	j.Processes = ps.slab[start:end:end]
	j.UID, j.User = j.Processes[0].UID, j.Processes[0].User
	slices.Sort(devs)
	devs = slices.Compact(devs)
	d0 := len(ps.devSlab)
	ps.devSlab = append(ps.devSlab, devs...)
	j.Devices = ps.devSlab[d0:len(ps.devSlab):len(ps.devSlab)]
	ps.a.devs = devs
	j.SMUtilPercent = min(j.SMUtilPercent, 100)

	j.Context = ps.ctx(r)
	if p, ok := ps.a.Pods.Lookup(j.Context.PodUID); ok {
		j.Context.Namespace, j.Context.PodName = p.Namespace, p.Name
	}
	argv := ps.cmdline(r)
	if !root.nameOK || root.nameComm != root.p.Comm {
		root.name, root.nameComm, root.nameOK = commandName(root.p.Comm, argv), root.p.Comm, true
	}
	j.Name = root.name
	if root.key == "" {
		root.key = "pid:" + strconv.Itoa(r) + ":" + strconv.FormatUint(root.p.StartTicks, 10)
	}
	j.Key = root.key
	kernel, isKernel := ps.kernel(r)
	if ko, ok := ps.a.Hints.(KernelOwners); ok && kernel != "" {
		if uid, ok := ko.KernelOwner(kernel); ok && uid != j.UID {
			kernel = "" // another user's kernel: this process only names it
		}
	}
	if id, name, ok := ps.a.run(r); ok {
		j.Kind, j.RunID, j.Key = KindRun, id, "run:"+id
		if name != "" {
			j.Name = name
		}
	} else if isKernel {
		j.Kind = KindNotebook
		if kernel != "" {
			j.Key = "notebook:" + kernel
			j.Name = "kernel " + shortID(kernel)
		}
	} else {
		switch c := j.Context; {
		case c.PodUID != "":
			j.Kind = KindPod
		case c.ContainerID != "":
			j.Kind = KindContainer
		case c.SlurmJob != "":
			j.Kind = KindSlurm
		case strings.HasSuffix(c.Unit, ".service"):
			j.Kind = KindService
		default:
			j.Kind = KindProcess
		}
	}
	if isKernel {
		// A kernel is grouped by its notebook, supervised or not.
		j.Kind, j.Kernel = KindNotebook, kernel
		if nh, ok := ps.a.Hints.(NotebookHints); ok && kernel != "" {
			if nb, ok := nh.NotebookForKernel(kernel); ok && nb != "" {
				j.Notebook, j.Name = nb, nb
			}
		}
	}
	j.Orphan, j.OrphanReason = ps.orphan(r)
	return j
}

// orphan reports whether the job rooted at r has lost its parent job: it was
// reparented to init (or has no parent) and the process group it was started
// in has no leader any more, or it is a multiprocessing child whose parent
// exited.
func (ps *pass) orphan(r int) (bool, string) {
	in := ps.procs[r]
	if in.p.PPID > 1 {
		if _, ok := ps.procs[in.p.PPID]; ok {
			return false, ""
		}
	}
	if s := ps.status(r).NSpid; len(s) > 1 && s[len(s)-1] == 1 {
		return false, "" // a container's init has no parent in its namespace
	}
	if pg := in.p.PGID; pg > 0 && pg != in.p.PID {
		if _, ok := ps.procs[pg]; !ok {
			return true, fmt.Sprintf("reparented to init; its process group leader %d has exited", pg)
		}
	}
	for _, a := range ps.cmdline(r) {
		if strings.Contains(a, "multiprocessing.spawn") || strings.Contains(a, "multiprocessing.forkserver") {
			return true, "a multiprocessing child whose parent has exited"
		}
	}
	return false, ""
}

// commandName is a short label for a command: the script for an
// interpreter, else the program.
func commandName(comm string, argv []string) string {
	if len(argv) == 0 {
		return comm
	}
	prog := baseName(argv[0])
	if strings.HasPrefix(program(prog), "python") || launchers[prog] {
		for i := 1; i < len(argv); i++ {
			a := argv[i]
			if a == "-m" && i+1 < len(argv) {
				return prog + " -m " + argv[i+1]
			}
			if a == "-c" {
				return prog + " -c"
			}
			if !strings.HasPrefix(a, "-") {
				if launchers[baseName(a)] {
					// python /usr/bin/torchrun ddp.py: name the launcher.
					return commandName(comm, argv[i:])
				}
				return prog + " " + baseName(a)
			}
		}
	}
	return prog
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

func shortID(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
