package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/units"
)

// Group is a memory cgroup vramguard created for one job.
type Group struct {
	// Dir is the cgroup directory; empty for a systemd scope, whose
	// directory is known only once the job runs in it.
	Dir     string
	Version int
	Limit   uint64
	// Wrap, when set, is a command prefix that starts the job inside the
	// group (systemd-run --user --scope ...). Otherwise the job joins the
	// group by writing its PID to ProcsFile before it execs.
	Wrap []string
}

// ProcsFile is the file a process writes its PID to in order to join.
func (g *Group) ProcsFile() string {
	if g.Dir == "" {
		return ""
	}
	return filepath.Join(g.Dir, "cgroup.procs")
}

// Create makes a memory cgroup capped at limit bytes for a job. Its
// directory is named name followed by a random suffix ("NAME-1a2b3c4d"), made
// anew by each call: a creator never adopts a directory that exists, which
// another creator (two runs supervised in one process, a test binary's
// concurrent tests) may be writing or about to remove. It tries, in order: a child of the caller's own v1 memory cgroup; a cgroup
// v2 child of the caller's cgroup or its parent, where the memory controller
// is delegated; systemd's user manager (systemd-run --user --scope). It
// returns an error wrapping ErrUnavailable, saying what it tried, when none
// works: the caller must refuse to run rather than run uncapped.
func Create(name string, limit uint64) (*Group, error) {
	var tried []string
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("%w: read /proc/self/cgroup: %v", ErrUnavailable, err)
	}
	var v1Path, v2Path string
	hasV2 := false
	for _, e := range procfs.ParseCgroups(self) {
		if slices.Contains(e.Controllers, "memory") {
			v1Path = e.Path
		}
		if e.ID == 0 {
			v2Path, hasV2 = e.Path, true
		}
	}
	if v1Path != "" && exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") {
		parent := filepath.Join("/sys/fs/cgroup/memory", v1Path)
		g, err := createV1(parent, name, limit)
		if err == nil {
			return g, nil
		}
		tried = append(tried, "cgroup v1 under "+parent+": "+err.Error())
	}
	if hasV2 && exists("/sys/fs/cgroup/cgroup.controllers") {
		for _, parent := range []string{filepath.Join("/sys/fs/cgroup", v2Path), filepath.Dir(filepath.Join("/sys/fs/cgroup", v2Path))} {
			g, err := createV2(parent, name, limit)
			if err == nil {
				return g, nil
			}
			tried = append(tried, "cgroup v2 under "+parent+": "+err.Error())
		}
	}
	if g, err := systemdScope(limit); err == nil {
		return g, nil
	} else {
		tried = append(tried, "systemd user manager: "+err.Error())
	}
	return nil, fmt.Errorf("%w to apply the memory limit; tried:\n  %s\nRun as root, in a delegated cgroup v2 subtree, or in a session with a systemd user manager (loginctl enable-linger)",
		ErrUnavailable, strings.Join(tried, "\n  "))
}

// mkdirUnique makes a new directory under parent named name-<8 hex digits> and
// returns its path; it never returns one that existed before the call.
func mkdirUnique(parent, name string) (string, error) {
	for range 8 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		dir := filepath.Join(parent, name+"-"+hex.EncodeToString(b[:]))
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("no unused name %s-<8 hex digits> under %s", name, parent)
}

// mkdirLimited makes a fresh cgroup name-<hex> under parent and writes
// limit to its file limitFile; the cgroup is removed again when the limit
// cannot be written.
func mkdirLimited(parent, name, limitFile string, limit uint64) (string, error) {
	dir, err := mkdirUnique(parent, name)
	if err != nil {
		return "", err
	}
	if err := writeFile(filepath.Join(dir, limitFile), strconv.FormatUint(limit, 10)); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

func createV1(parent, name string, limit uint64) (*Group, error) {
	dir, err := mkdirLimited(parent, name, "memory.limit_in_bytes", limit)
	if err != nil {
		return nil, err
	}
	// Without a swap cap, a v1 job over its limit swaps instead of dying.
	if exists(filepath.Join(dir, "memory.memsw.limit_in_bytes")) {
		_ = writeFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), strconv.FormatUint(limit, 10))
	}
	return &Group{Dir: dir, Version: 1, Limit: limit}, nil
}

func createV2(parent, name string, limit uint64) (*Group, error) {
	ctl, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return nil, err
	}
	if !strings.Contains(" "+string(ctl)+" ", " memory ") {
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+memory"); err != nil {
			return nil, fmt.Errorf("enable the memory controller: %w", err)
		}
	}
	dir, err := mkdirLimited(parent, name, "memory.max", limit)
	if err != nil {
		return nil, err
	}
	_ = writeFile(filepath.Join(dir, "memory.swap.max"), "0")
	return &Group{Dir: dir, Version: 2, Limit: limit}, nil
}

// systemdScope returns a group that starts the job in a transient scope of
// the user's systemd manager, the way unprivileged users get a memory cap.
func systemdScope(limit uint64) (*Group, error) {
	run, err := exec.LookPath("systemd-run")
	if err != nil {
		return nil, errors.New("systemd-run not found")
	}
	ctl, err := exec.LookPath("systemctl")
	if err != nil {
		return nil, errors.New("systemctl not found")
	}
	cmd := exec.Command(ctl, "--user", "show", "--property=Version")
	cmd.Stderr = nil
	if out, err := cmd.Output(); err != nil || !strings.HasPrefix(string(out), "Version=") {
		return nil, errors.New("no systemd user manager is reachable")
	}
	n := strconv.FormatUint(limit, 10)
	return &Group{Version: 2, Limit: limit,
		Wrap: []string{run, "--user", "--scope", "--quiet", "--collect", "-p", "MemoryMax=" + n, "-p", "MemorySwapMax=0", "--"}}, nil
}

// Join moves the calling process into the group.
func (g *Group) Join() error {
	if g.Dir == "" {
		return nil
	}
	return writeFile(g.ProcsFile(), strconv.Itoa(os.Getpid()))
}

// Kill SIGKILLs every process in the group until it is empty or the deadline
// passes; it uses cgroup.kill where the kernel has it.
func (g *Group) Kill(timeout time.Duration) error {
	if g == nil || g.Dir == "" {
		return nil
	}
	return KillDir(g.Dir, timeout)
}

// KillDir SIGKILLs every process of the cgroup directory dir.
func KillDir(dir string, timeout time.Duration) error {
	if exists(filepath.Join(dir, "cgroup.kill")) {
		_ = writeFile(filepath.Join(dir, "cgroup.kill"), "1")
	}
	deadline := time.Now().Add(timeout)
	for {
		pids, err := Procs(dir)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has %s", dir, units.Plural(len(pids), "process"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Procs lists the PIDs in a cgroup directory.
func Procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// Remove deletes the group's directory; it must be empty.
func (g *Group) Remove() error {
	if g == nil || g.Dir == "" {
		return nil
	}
	var err error
	for i := 0; i < 50; i++ {
		if err = os.Remove(g.Dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return cerr
}
