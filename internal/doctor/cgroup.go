package doctor

import (
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/procfs"
)

// CgroupLimits are the memory and CPU limits that apply to this process,
// the tightest along its cgroup path, from cgroup v2 and v1 alike.
type CgroupLimits struct {
	Version     string  `json:"version"`                // "v1", "v2", "hybrid", "" when none was found
	MemoryBytes uint64  `json:"memory_bytes,omitempty"` // 0: no limit
	MemoryFile  string  `json:"memory_file,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"` // quota/period; 0: no limit
	CPUFile     string  `json:"cpu_file,omitempty"`
}

// v1Unlimited is the smallest value cgroup v1 uses for "no limit"
// (PAGE_COUNTER_MAX rounded to pages is just under 2^63).
const v1Unlimited = 1 << 62

func readCgroupLimits(env *Env) CgroupLimits {
	var l CgroupLimits
	b, err := env.readFile("/proc/self/cgroup")
	if err != nil {
		return l
	}
	entries := procfs.ParseCgroups(b)
	v2base := ""
	for _, base := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if env.exists(path.Join(base, "cgroup.controllers")) {
			v2base = base
			break
		}
	}
	hasV1 := false
	for _, e := range entries {
		if e.ID == 0 && len(e.Controllers) == 0 {
			if v2base != "" {
				l.Version = "v2"
				l.minMemory(walkCgroup(env, v2base, e.Path, "memory.max", parseV2Bytes))
				l.minCPU(walkCgroup(env, v2base, e.Path, "cpu.max", parseV2CPU))
			}
			continue
		}
		hasV1 = true
		for _, c := range e.Controllers {
			switch c {
			case "memory":
				l.minMemory(walkCgroup(env, v1Dir(env, "memory", e.Controllers), e.Path, "memory.limit_in_bytes", parseV1Bytes))
			case "cpu":
				base := v1Dir(env, "cpu", e.Controllers)
				l.minCPU(walkCgroup(env, base, e.Path, "cpu.cfs_quota_us", func(dir, s string) (float64, bool) {
					q, err := strconv.ParseFloat(s, 64)
					if err != nil || q <= 0 {
						return 0, false
					}
					pb, err := env.readFile(path.Join(dir, "cpu.cfs_period_us"))
					period := 100000.0
					if err == nil {
						if p, err := strconv.ParseFloat(strings.TrimSpace(string(pb)), 64); err == nil && p > 0 {
							period = p
						}
					}
					return q / period, true
				}))
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
	return l
}

// v1Dir finds the mount of a v1 controller: /sys/fs/cgroup/memory, or a
// co-mounted /sys/fs/cgroup/cpu,cpuacct.
func v1Dir(env *Env, ctrl string, ctrls []string) string {
	for _, d := range []string{path.Join("/sys/fs/cgroup", ctrl), path.Join("/sys/fs/cgroup", strings.Join(ctrls, ","))} {
		if env.exists(d) {
			return d
		}
	}
	return path.Join("/sys/fs/cgroup", ctrl)
}

type found struct {
	v    float64
	file string
}

// walkCgroup reads file in the process's cgroup and every ancestor up to the
// mount and returns the smallest limit. Inside a container with its own
// cgroup namespace the path in /proc/self/cgroup may not exist under the
// mount; then the mount's own directory is the container's cgroup.
func walkCgroup(env *Env, base, cgPath, file string, parse func(dir, content string) (float64, bool)) (found, bool) {
	dir := path.Join(base, cgPath)
	if !env.exists(dir) {
		dir = base
	}
	best, have := found{}, false
	for {
		p := path.Join(dir, file)
		if b, err := env.readFile(p); err == nil {
			if v, ok := parse(dir, strings.TrimSpace(string(b))); ok && (!have || v < best.v) {
				best, have = found{v, p}, true
			}
		}
		if dir == base || dir == "/" || len(dir) <= len(base) {
			break
		}
		dir = path.Dir(dir)
	}
	return best, have
}

func (l *CgroupLimits) minMemory(f found, ok bool) {
	if ok && (l.MemoryBytes == 0 || uint64(f.v) < l.MemoryBytes) {
		l.MemoryBytes, l.MemoryFile = uint64(f.v), f.file
	}
}

func (l *CgroupLimits) minCPU(f found, ok bool) {
	if ok && (l.CPUs == 0 || f.v < l.CPUs) {
		l.CPUs, l.CPUFile = f.v, f.file
	}
}

func parseV2Bytes(_, s string) (float64, bool) {
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return float64(n), true
}

func parseV1Bytes(_, s string) (float64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n >= v1Unlimited {
		return 0, false
	}
	return float64(n), true
}

// parseV2CPU parses cpu.max: "max 100000" (no limit) or "200000 100000".
func parseV2CPU(_, s string) (float64, bool) {
	f := strings.Fields(s)
	if len(f) == 0 || f[0] == "max" {
		return 0, false
	}
	q, err := strconv.ParseFloat(f[0], 64)
	if err != nil || q <= 0 {
		return 0, false
	}
	period := 100000.0
	if len(f) > 1 {
		if p, err := strconv.ParseFloat(f[1], 64); err == nil && p > 0 {
			period = p
		}
	}
	return q / period, true
}

// parseCPUList counts the CPUs in a list like "0-3,8,10-11".
func parseCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		if b >= a {
			n += b - a + 1
		}
	}
	return n
}

// fmtCPUs prints a CPU count without trailing zeros ("2", "0.5").
func fmtCPUs(c float64) string {
	if c == math.Trunc(c) {
		return strconv.FormatFloat(c, 'f', 0, 64)
	}
	return strconv.FormatFloat(c, 'f', 2, 64)
}
