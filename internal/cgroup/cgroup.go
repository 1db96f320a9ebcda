// Package cgroup reads the memory accounting of a process's cgroup and the
// memory and CPU limits along its cgroup path (v1 and v2), and creates a
// memory-capped cgroup for a job. Reads are rooted at a configurable path
// so tests use fixture trees; creation always acts on the live system. It
// never moves a process other than the caller itself.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/procfs"
)

// Memory is the memory accounting of one cgroup.
type Memory struct {
	Version int    `json:"version"` // 1 or 2
	Path    string `json:"path"`    // directory under the cgroup mount
	Usage   uint64 `json:"usage_bytes"`
	// Limit is 0 when the cgroup has no limit.
	Limit    uint64 `json:"limit_bytes"`
	Peak     uint64 `json:"peak_bytes"`
	OOMKills uint64 `json:"oom_kills"`
}

// Reader finds and reads cgroups under Root (which holds proc/ and sys/).
type Reader struct {
	Root string
}

func (r Reader) fs() procfs.FS { return procfs.FS{Root: r.Root} }

func (r Reader) sys(elem ...string) string {
	root := r.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root, "sys", "fs", "cgroup"}, elem...)...)
}

// MemoryDir returns the directory of pid's memory cgroup and its version.
func (r Reader) MemoryDir(pid int) (string, int, error) {
	entries, err := r.fs().Cgroups(pid)
	if err != nil {
		return "", 0, err
	}
	for _, e := range entries {
		for _, c := range e.Controllers {
			if c == "memory" {
				if d := r.sys("memory", e.Path); exists(filepath.Join(d, "memory.usage_in_bytes")) {
					return d, 1, nil
				}
			}
		}
	}
	for _, e := range entries {
		if e.ID == 0 {
			for _, base := range []string{r.sys(), r.sys("unified")} {
				d := filepath.Join(base, e.Path)
				if exists(filepath.Join(d, "memory.current")) {
					return d, 2, nil
				}
			}
		}
	}
	return "", 0, fmt.Errorf("no memory cgroup for pid %d", pid)
}

// MemoryOf reads the memory cgroup of pid.
func (r Reader) MemoryOf(pid int) (Memory, error) {
	dir, v, err := r.MemoryDir(pid)
	if err != nil {
		return Memory{}, err
	}
	return ReadMemory(dir, v)
}

// memoryFiles names, for each cgroup version, the files of a memory
// cgroup that Memory is read from.
var memoryFiles = map[int]struct{ usage, limit, peak, events string }{
	1: {"memory.usage_in_bytes", "memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.oom_control"},
	2: {"memory.current", "memory.max", "memory.peak", "memory.events"},
}

// ReadMemory reads a memory cgroup directory of the given version. Only
// the usage must be readable; a limit, peak or OOM kill count that is not
// is zero.
func ReadMemory(dir string, version int) (Memory, error) {
	m := Memory{Version: version, Path: dir}
	f, ok := memoryFiles[version]
	if !ok {
		return m, fmt.Errorf("unknown cgroup version %d", version)
	}
	var err error
	if m.Usage, err = readUint(filepath.Join(dir, f.usage)); err != nil {
		return m, err
	}
	m.Limit, _ = memoryLimit(filepath.Join(dir, f.limit))
	m.Peak, _ = readUint(filepath.Join(dir, f.peak))
	m.OOMKills = keyed(filepath.Join(dir, f.events), "oom_kill")
	return m, nil
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

func keyed(path, key string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
	}
	return 0
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ErrUnavailable means no memory cgroup can be created here.
var ErrUnavailable = errors.New("no memory cgroup can be created")
