// Package procfs reads processes from a /proc tree rooted at a configurable
// path, so tests run against fixture trees. It only reads; it never signals
// or changes a process.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	r := getReader()
	defer putReader(r)
	r.setPath(fs.Root, pid, "stat")
	b, err := r.read()
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
// hold spaces and parentheses, so fields are counted from the last ')'. It
// allocates nothing: command names are interned.
func ParseStat(b []byte) (Proc, error) {
	open := bytes.IndexByte(b, '(')
	closeIdx := bytes.LastIndexByte(b, ')')
	if open < 0 || closeIdx < open {
		return Proc{}, fmt.Errorf("no command name")
	}
	var p Proc
	pid, ok := parseInt(bytes.TrimSpace(b[:open]))
	if !ok || int64(int(pid)) != pid {
		return Proc{}, fmt.Errorf("pid: invalid %q", bytes.TrimSpace(b[:open]))
	}
	p.PID = int(pid)
	p.Comm = intern(b[open+1 : closeIdx])
	// Fields 3 (state) to 24 (rss) of proc(5).
	rest := b[closeIdx+1:]
	var f []byte
	var ints [25]uint64
	for i := 3; i <= 24; i++ {
		if f, rest = nextField(rest); len(f) == 0 {
			return Proc{}, fmt.Errorf("only %d fields", i-1)
		}
		if i == 3 {
			if len(f) == 1 && f[0] < 0x80 {
				p.State = states[f[0]]
			} else {
				p.State = string(f)
			}
			continue
		}
		v, ok := parseInt(f)
		if !ok {
			return Proc{}, fmt.Errorf("field %d: invalid %q", i, f)
		}
		if v < 0 {
			v = 0
		}
		ints[i] = uint64(v)
	}
	p.PPID, p.PGID, p.SID = int(ints[4]), int(ints[5]), int(ints[6])
	p.CPUTicks = ints[14] + ints[15] // utime + stime
	p.StartTicks = ints[22]          // starttime
	p.RSSBytes = ints[24] * PageSize // rss, in pages
	return p, nil
}

// PIDs lists the numeric entries of /proc in ascending order.
func (fs FS) PIDs() ([]int, error) {
	r := getReader()
	defer putReader(r)
	if err := r.pidsInto(fs.Root); err != nil {
		return nil, fmt.Errorf("read %s: %w", fs.path(), err)
	}
	pids := slices.Clone(r.pids)
	slices.Sort(pids)
	return pids, nil
}

// All reads every process, in ascending order of PID. Processes that exit
// while being read are left out. Apart from the result it allocates nothing
// once warm: one pooled buffer serves every file, and the live /proc's stat
// files stay open from one call to the next (see statFiles).
func (fs FS) All() ([]Proc, error) { return fs.AppendAll(nil) }

// AppendAll is All appending to dst, so a caller that scans every second can
// reuse one slice.
func (fs FS) AppendAll(dst []Proc) ([]Proc, error) {
	r := getReader()
	defer putReader(r)
	if err := r.pidsInto(fs.Root); err != nil {
		return nil, fmt.Errorf("read %s: %w", fs.path(), err)
	}
	slices.Sort(r.pids)
	var kept *statFiles
	if fs.Root == "" {
		if kept = liveStat.Swap(nil); kept != nil {
			kept.gen++
			defer func() {
				kept.sweep()
				if !liveStat.CompareAndSwap(nil, kept) {
					kept.closeAll()
				}
			}()
		}
	}
	out := slices.Grow(dst, len(r.pids))
	for _, pid := range r.pids {
		var b []byte
		var err error
		if kept != nil {
			b, err = kept.read(r, pid)
		} else {
			r.setPath(fs.Root, pid, "stat")
			b, err = r.read()
		}
		if err != nil {
			continue
		}
		p, err := ParseStat(b)
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
	return readFile(fs, pid, "cmdline", parseCmdline)
}

func parseCmdline(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
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
	return readFile(fs, pid, "status", ParseStatus)
}

// cutLine returns b's first line and what follows its newline.
func cutLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// ParseStatus parses /proc/<pid>/status; unknown or malformed lines are
// ignored. It allocates only the name and the NSpid list.
func ParseStatus(b []byte) Status {
	var s Status
	for len(b) > 0 {
		var line []byte
		line, b = cutLine(b)
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			continue
		}
		k, v := line[:colon], line[colon+1:]
		switch string(k) {
		case "Name":
			s.Name = string(bytes.TrimSpace(v))
		case "Uid":
			if f, _ := nextField(v); len(f) > 0 {
				if n, ok := parseInt(f); ok && int64(int(n)) == n {
					s.UID = int(n)
				}
			}
		case "NSpid":
			n := 0
			for f, rest := nextField(v); len(f) > 0; f, rest = nextField(rest) {
				n++
			}
			if n > 0 {
				s.NSpid = make([]int, 0, n)
			}
			for f, rest := nextField(v); len(f) > 0; f, rest = nextField(rest) {
				if x, ok := parseInt(f); ok && int64(int(x)) == x {
					s.NSpid = append(s.NSpid, int(x))
				}
			}
			if len(s.NSpid) == 0 {
				s.NSpid = nil
			}
		case "VmRSS":
			s.VmRSS = kBBytes(v)
		case "VmSwap":
			s.VmSwap = kBBytes(v)
		}
	}
	return s
}

// kBBytes is the first field of a "  1234 kB" value, in bytes (0 when it
// is not a number).
func kBBytes(v []byte) uint64 {
	f, _ := nextField(v)
	n, _ := parseUint(f)
	return n * 1024
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
	return readFile(fs, pid, "cgroup", ParseCgroups)
}

// ParseCgroups parses /proc/<pid>/cgroup lines "id:controllers:path". The
// paths share one copy of the file.
func ParseCgroups(b []byte) []CgroupEntry {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	all := string(b)
	out := make([]CgroupEntry, 0, strings.Count(all, "\n")+1)
	for rest := all; rest != ""; {
		line := rest
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		idStr, after, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(after, ":")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(idStr)
		if err != nil {
			continue
		}
		e := CgroupEntry{ID: id, Path: path}
		if ctrls != "" {
			e.Controllers = strings.Split(ctrls, ",")
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil
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
