// Package procfs reads processes from a /proc tree rooted at a configurable
// path, so tests run against fixture trees. It only reads; it never signals
// or changes a process.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PageSize is the size used to turn page counts into bytes.
var PageSize = uint64(os.Getpagesize())

// ClockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is
// 100 on every Linux architecture vramguard supports.
const ClockTicks = 100

// FS is a /proc tree. The zero value reads the live /proc.
type FS struct {
	// Root is the directory that holds proc/ (and sys/, for callers that
	// read it); "" means "/".
	Root string
}

func (fs FS) path(elem ...string) string {
	root := fs.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root, "proc"}, elem...)...)
}

// Proc is one process as /proc/<pid>/stat shows it.
type Proc struct {
	PID   int    `json:"pid"`
	PPID  int    `json:"ppid"`
	PGID  int    `json:"pgid"`
	SID   int    `json:"sid"`
	Comm  string `json:"comm"`
	State string `json:"state"`
	// CPUTicks is utime+stime in ClockTicks.
	CPUTicks uint64 `json:"cpu_ticks"`
	// StartTicks is the start time after boot in ClockTicks; with PID it
	// identifies a process across PID reuse.
	StartTicks uint64 `json:"start_ticks"`
	RSSBytes   uint64 `json:"rss_bytes"`
}

// Proc reads /proc/<pid>/stat.
func (fs FS) Proc(pid int) (Proc, error) {
	b, err := os.ReadFile(fs.path(strconv.Itoa(pid), "stat"))
	if err != nil {
		return Proc{}, err
	}
	p, err := ParseStat(b)
	if err != nil {
		return Proc{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return p, nil
}

// ParseStat parses the contents of /proc/<pid>/stat. The command name may
// hold spaces and parentheses, so fields are counted from the last ')'.
func ParseStat(b []byte) (Proc, error) {
	open := bytes.IndexByte(b, '(')
	closeIdx := bytes.LastIndexByte(b, ')')
	if open < 0 || closeIdx < open {
		return Proc{}, fmt.Errorf("no command name")
	}
	var p Proc
	var err error
	if p.PID, err = strconv.Atoi(strings.TrimSpace(string(b[:open]))); err != nil {
		return Proc{}, fmt.Errorf("pid: %w", err)
	}
	p.Comm = string(b[open+1 : closeIdx])
	f := strings.Fields(string(b[closeIdx+1:]))
	// f[0] is field 3 (state) of proc(5).
	if len(f) < 22 {
		return Proc{}, fmt.Errorf("only %d fields", len(f)+2)
	}
	p.State = f[0]
	ints := make([]uint64, len(f))
	for i := 1; i < 22; i++ {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return Proc{}, fmt.Errorf("field %d: %w", i+3, err)
		}
		if v < 0 {
			v = 0
		}
		ints[i] = uint64(v)
	}
	p.PPID, p.PGID, p.SID = int(ints[1]), int(ints[2]), int(ints[3])
	p.CPUTicks = ints[11] + ints[12] // utime (14) + stime (15)
	p.StartTicks = ints[19]          // starttime (22)
	p.RSSBytes = ints[21] * PageSize // rss (24), in pages
	return p, nil
}

// PIDs lists the numeric entries of /proc in ascending order.
func (fs FS) PIDs() ([]int, error) {
	ents, err := os.ReadDir(fs.path())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", fs.path(), err)
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids, nil
}

// All reads every process. Processes that exit while being read are left out.
func (fs FS) All() ([]Proc, error) {
	pids, err := fs.PIDs()
	if err != nil {
		return nil, err
	}
	out := make([]Proc, 0, len(pids))
	for _, pid := range pids {
		p, err := fs.Proc(pid)
		if err != nil {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// Tree returns root and all its descendants among procs, root first, then in
// breadth-first order. It returns nil when root is not among procs.
func Tree(procs []Proc, root int) []Proc {
	children := make(map[int][]Proc, len(procs))
	var rootProc *Proc
	for i := range procs {
		children[procs[i].PPID] = append(children[procs[i].PPID], procs[i])
		if procs[i].PID == root {
			rootProc = &procs[i]
		}
	}
	if rootProc == nil {
		return nil
	}
	out := []Proc{*rootProc}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].PID]...)
	}
	return out
}

// Cmdline reads /proc/<pid>/cmdline as argv.
func (fs FS) Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fs.path(strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

// Status is the subset of /proc/<pid>/status vramguard uses.
type Status struct {
	Name string
	UID  int
	// NSpid lists the PID in each PID namespace, outermost first; the last
	// one is the PID as the process itself sees it.
	NSpid  []int
	VmRSS  uint64
	VmSwap uint64
}

// Status reads /proc/<pid>/status.
func (fs FS) Status(pid int) (Status, error) {
	b, err := os.ReadFile(fs.path(strconv.Itoa(pid), "status"))
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(b), nil
}

// ParseStatus parses /proc/<pid>/status; unknown or malformed lines are ignored.
func ParseStatus(b []byte) Status {
	var s Status
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "Name":
			s.Name = strings.TrimSpace(v)
		case "Uid":
			if len(f) > 0 {
				s.UID, _ = strconv.Atoi(f[0])
			}
		case "NSpid":
			for _, x := range f {
				if n, err := strconv.Atoi(x); err == nil {
					s.NSpid = append(s.NSpid, n)
				}
			}
		case "VmRSS":
			s.VmRSS = kB(f)
		case "VmSwap":
			s.VmSwap = kB(f)
		}
	}
	return s
}

func kB(f []string) uint64 {
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseUint(f[0], 10, 64)
	return n * 1024
}

// CgroupEntry is one line of /proc/<pid>/cgroup.
type CgroupEntry struct {
	ID          int      // hierarchy id; 0 for the cgroup v2 unified hierarchy
	Controllers []string // empty for v2
	Path        string
}

// Cgroups reads /proc/<pid>/cgroup.
func (fs FS) Cgroups(pid int) ([]CgroupEntry, error) {
	b, err := os.ReadFile(fs.path(strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, err
	}
	return ParseCgroups(b), nil
}

// ParseCgroups parses /proc/<pid>/cgroup lines "id:controllers:path".
func ParseCgroups(b []byte) []CgroupEntry {
	var out []CgroupEntry
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		id, err := strconv.Atoi(parts[0])
		if err != nil {
			continue
		}
		e := CgroupEntry{ID: id, Path: parts[2]}
		if parts[1] != "" {
			e.Controllers = strings.Split(parts[1], ",")
		}
		out = append(out, e)
	}
	return out
}

// MemInfo is the subset of /proc/meminfo vramguard uses, in bytes.
type MemInfo struct {
	Total, Available, SwapTotal, SwapFree uint64
}

// MemInfo reads /proc/meminfo.
func (fs FS) MemInfo() (MemInfo, error) {
	b, err := os.ReadFile(fs.path("meminfo"))
	if err != nil {
		return MemInfo{}, err
	}
	var m MemInfo
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n := kB(strings.Fields(v))
		switch k {
		case "MemTotal":
			m.Total = n
		case "MemAvailable":
			m.Available = n
		case "SwapTotal":
			m.SwapTotal = n
		case "SwapFree":
			m.SwapFree = n
		}
	}
	return m, nil
}
