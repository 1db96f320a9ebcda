package ranks

import (
	"strconv"
	"strings"
	"sync"
)

// Environment variables that name a process's group (its job across
// nodes) and node, strongest first. torchrun's TORCHELASTIC_RUN_ID is its
// --rdzv-id, "none" unless given (or a fresh id under --standalone):
// "none" names no job.
var (
	groupVars = []string{"VRAMGUARD_GROUP", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}
	nodeVars  = []string{"VRAMGUARD_NODE", "SLURMD_NODENAME"}
)

// Place is what a process's environment says of its place in a
// distributed job: its identity (nil: no variable names a rank), the job
// it belongs to across nodes and the node its launcher says it runs on
// ("" when the environment names none).
type Place struct {
	ID    *Identity
	Group string
	Node  string
	// MemRequest is the host memory the job asked Slurm for on this node,
	// in bytes: SLURM_MEM_PER_NODE, else SLURM_MEM_PER_CPU times
	// SLURM_CPUS_ON_NODE (both in MiB, as Slurm exports them); 0 when
	// neither is set.
	MemRequest uint64
}

// PlaceFromEnv reads a process's Place from its environment (KEY=VALUE
// strings). A process whose environment names no rank has no group or
// node either.
func PlaceFromEnv(env []string) Place {
	id, ok := FromEnv(env)
	if !ok {
		return Place{}
	}
	return Place{ID: &id, Group: lookupFirst(env, groupVars, "none"), Node: lookupFirst(env, nodeVars, ""), MemRequest: MemRequest(env)}
}

// MemRequest is the host memory a Slurm job asked for on the node a
// process runs on (Place.MemRequest), from its environment.
func MemRequest(env []string) uint64 {
	num := func(k string) uint64 {
		v := lookupFirst(env, []string{k}, "")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0
		}
		return n
	}
	if n := num("SLURM_MEM_PER_NODE"); n > 0 {
		return n << 20
	}
	if n, c := num("SLURM_MEM_PER_CPU"), num("SLURM_CPUS_ON_NODE"); n > 0 && c > 0 {
		return n * c << 20
	}
	return 0
}

// lookupFirst is the value of the first of keys set (non-empty, and not
// skip) in env; the last assignment of a key wins, as for a process.
func lookupFirst(env []string, keys []string, skip string) string {
	for _, k := range keys {
		for i := len(env) - 1; i >= 0; i-- {
			if v, found := strings.CutPrefix(env[i], k+"="); found {
				if v = strings.TrimSpace(v); v != "" && v != skip {
					return v
				}
				break
			}
		}
	}
	return ""
}

// MaxCache bounds a Cache; it is also pruned to the live processes (Keep)
// after every sample.
const MaxCache = 1 << 16

type cacheEntry struct {
	start uint64
	p     Place
}

// Cache remembers each process's Place by PID and start time, so that a
// process's environment is read once in its life (a launcher sets it
// before exec; what the process changes later is not its place). A
// process whose environment cannot be read has the zero Place. The zero
// Cache is ready to use; it is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	entries map[int]cacheEntry
}

// Get is the Place of process pid started at start (its start time in
// clock ticks), reading its environment with read the first time.
func (c *Cache) Get(pid int, start uint64, read func(int) ([]string, error)) Place {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[pid]; ok && e.start == start {
		return e.p
	}
	var p Place
	if env, err := read(pid); err == nil {
		p = PlaceFromEnv(env)
	}
	if c.entries == nil {
		c.entries = map[int]cacheEntry{}
	}
	if _, ok := c.entries[pid]; ok || len(c.entries) < MaxCache {
		c.entries[pid] = cacheEntry{start: start, p: p}
	}
	return p
}

// Keep drops the entries of processes not in live.
func (c *Cache) Keep(live map[int]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.entries {
		if !live[pid] {
			delete(c.entries, pid)
		}
	}
}

// Len is the number of processes remembered.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
