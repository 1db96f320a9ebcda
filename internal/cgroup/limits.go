package cgroup

import (
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/procfs"
)

// Limits are the memory and CPU limits that bind a process: for each, the
// tightest one set on its cgroup or on any ancestor up to the hierarchy's
// mount, from cgroup v2 and v1 alike. A process in a cgroup without a limit
// of its own is still held by its container's or its slice's.
type Limits struct {
	// Version is "v1", "v2", "hybrid" (v1 controllers beside the unified
	// hierarchy) or "" when the process is in no hierarchy found here.
	Version string `json:"version"`
	// MemoryBytes is 0 when nothing limits memory.
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// MemoryFile is the file that sets MemoryBytes, as the examined system
	// names it (/sys/fs/cgroup/..., without Root).
	MemoryFile string `json:"memory_file,omitempty"`
	// CPUs is the CPU quota over its period (2 for "200000 100000"); 0
	// when nothing limits CPU time.
	CPUs    float64 `json:"cpus,omitempty"`
	CPUFile string  `json:"cpu_file,omitempty"`
}

// LimitsOf reads the limits that bind pid; pid 0 means the calling process
// (/proc/self), as in sched_getaffinity(2). The error is only for an
// unreadable /proc/<pid>/cgroup: files missing under /sys/fs/cgroup mean no
// limit there.
func (r Reader) LimitsOf(pid int) (Limits, error) {
	proc := "self"
	if pid != 0 {
		proc = strconv.Itoa(pid)
	}
	b, err := os.ReadFile(r.at("/proc/" + proc + "/cgroup"))
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	v2 := r.v2Base()
	hasV1 := false
	for _, e := range procfs.ParseCgroups(b) {
		if e.ID == 0 && len(e.Controllers) == 0 {
			if v2 != "" {
				l.Version = "v2"
				l.memory(r.tightest(v2, e.Path, "memory.max", memoryLimitAt))
				l.cpu(r.tightest(v2, e.Path, "cpu.max", cpuMaxAt))
			}
			continue
		}
		hasV1 = true
		for _, c := range e.Controllers {
			switch c {
			case "memory":
				l.memory(r.tightest(r.v1Base(c, e.Controllers), e.Path, "memory.limit_in_bytes", memoryLimitAt))
			case "cpu":
				l.cpu(r.tightest(r.v1Base(c, e.Controllers), e.Path, "cpu.cfs_quota_us", cfsQuotaAt))
			}
		}
	}
	if hasV1 {
		if l.Version == "v2" {
			l.Version = "hybrid"
		} else {
			l.Version = "v1"
		}
	}
	return l, nil
}

func (l *Limits) memory(v float64, file string) {
	if file != "" && (l.MemoryBytes == 0 || uint64(v) < l.MemoryBytes) {
		l.MemoryBytes, l.MemoryFile = uint64(v), file
	}
}

func (l *Limits) cpu(v float64, file string) {
	if file != "" && (l.CPUs == 0 || v < l.CPUs) {
		l.CPUs, l.CPUFile = v, file
	}
}

// at joins a path as the examined system names it under Root.
func (r Reader) at(p string) string {
	if r.Root == "" {
		return p
	}
	return filepath.Join(r.Root, p)
}

// v2Base is the mount of the unified hierarchy: /sys/fs/cgroup on a v2
// host, /sys/fs/cgroup/unified on a hybrid one; "" when there is none.
func (r Reader) v2Base() string {
	for _, b := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if exists(r.at(path.Join(b, "cgroup.controllers"))) {
			return b
		}
	}
	return ""
}

// v1Base is the mount of the v1 hierarchy that holds ctrl:
// /sys/fs/cgroup/memory, or a co-mounted /sys/fs/cgroup/cpu,cpuacct.
func (r Reader) v1Base(ctrl string, ctrls []string) string {
	own := path.Join("/sys/fs/cgroup", ctrl)
	for _, d := range []string{own, path.Join("/sys/fs/cgroup", strings.Join(ctrls, ","))} {
		if exists(r.at(d)) {
			return d
		}
	}
	return own
}

// tightest reads file in the cgroup base+cgPath and in each ancestor up to
// base, and returns the smallest limit and the file that sets it ("" when
// none does). In a container that shares the host's cgroup namespace but
// mounts only its own cgroup, cgPath (the host's name for it) is not there
// under the mount: the walk reaches the mount, which is the container's
// cgroup, all the same.
func (r Reader) tightest(base, cgPath, file string, limitAt func(string) (float64, bool)) (float64, string) {
	dir := path.Join(base, cgPath)
	best, bestFile := 0.0, ""
	for {
		p := path.Join(dir, file)
		if v, ok := limitAt(r.at(p)); ok && (bestFile == "" || v < best) {
			best, bestFile = v, p
		}
		if len(dir) <= len(base) || dir == "/" {
			return best, bestFile
		}
		dir = path.Dir(dir)
	}
}

// noLimit is where a memory limit stops being one: v1 writes "no limit"
// as PAGE_COUNTER_MAX in bytes, just under 2^63.
const noLimit = math.MaxInt64 / 2

// memoryLimit reads memory.max (v2) or memory.limit_in_bytes (v1); false
// when the file is missing or says there is no limit.
func memoryLimit(p string) (uint64, bool) {
	v, err := readUint(p) // "max" reads as 0
	if err != nil || v == 0 || v >= noLimit {
		return 0, false
	}
	return v, true
}

func memoryLimitAt(p string) (float64, bool) {
	v, ok := memoryLimit(p)
	return float64(v), ok
}

// cpuMaxAt reads a v2 cpu.max: "max 100000" (no limit) or "200000 100000".
func cpuMaxAt(p string) (float64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	period := ""
	if len(f) > 1 {
		period = f[1]
	}
	return quota(f[0], period)
}

// cfsQuotaAt reads a v1 cpu.cfs_quota_us (-1: no limit) over the
// cpu.cfs_period_us beside it.
func cfsQuotaAt(p string) (float64, bool) {
	q, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	period, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cpu.cfs_period_us"))
	return quota(strings.TrimSpace(string(q)), strings.TrimSpace(string(period)))
}

// quota divides a CPU quota by its period in CPUs; a period that is missing
// or unreadable is the kernel's default, 100000 µs.
func quota(q, period string) (float64, bool) {
	n, err := strconv.ParseFloat(q, 64)
	if err != nil || !(n > 0) || math.IsInf(n, 1) { // "max", -1
		return 0, false
	}
	d := 100000.0
	if p, err := strconv.ParseFloat(period, 64); err == nil && p > 0 {
		d = p
	}
	return n / d, true
}
