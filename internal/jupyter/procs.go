package jupyter

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/procfs"
)

// ProcSource is where kernel processes are looked up; procfs.FS is the real
// one.
type ProcSource interface {
	All() ([]procfs.Proc, error)
	Cmdline(pid int) ([]string, error)
	Status(pid int) (procfs.Status, error)
}

// ConnectionKernelID returns the kernel id named by a command line's
// connection-file argument (`-f .../kernel-<id>.json`, `--f=...`, or
// `--existing`-style `-f=...`), whatever the kernel's language.
func ConnectionKernelID(argv []string) (string, bool) {
	for i, a := range argv {
		var file string
		switch {
		case (a == "-f" || a == "--f" || a == "--connection-file") && i+1 < len(argv):
			file = argv[i+1]
		case strings.HasPrefix(a, "--f="), strings.HasPrefix(a, "-f="), strings.HasPrefix(a, "--connection-file="):
			file = a[strings.IndexByte(a, '=')+1:]
		default:
			continue
		}
		base := filepath.Base(file)
		if strings.HasPrefix(base, "kernel-") && strings.HasSuffix(base, ".json") {
			id := strings.TrimSuffix(strings.TrimPrefix(base, "kernel-"), ".json")
			if id != "" {
				return id, true
			}
		}
	}
	return "", false
}

// KernelProc is the process running one kernel, with its descendants.
type KernelProc struct {
	PID int
	// NSpid is the PID in each namespace, host first, when the kernel runs
	// in a nested PID namespace (a container); ContainerPID is the innermost.
	NSpid        []int
	ContainerPID int
	// Tree is the kernel and its descendants (workers, subprocesses).
	Tree []procfs.Proc
	// Supervised is set when vramguard runs the kernel (run --kernel).
	Supervised bool
}

// RSS sums the resident memory of the kernel and its descendants.
func (k KernelProc) RSS() uint64 {
	var n uint64
	for _, p := range k.Tree {
		n += p.RSSBytes
	}
	return n
}

// isSupervisor reports whether argv is vramguard itself (the supervisor or
// its shim), whose command line repeats the kernel's.
func isSupervisor(comm string, argv []string) bool {
	if comm == "vramguard" {
		return true
	}
	return len(argv) > 0 && filepath.Base(argv[0]) == "vramguard"
}

// KernelProcs finds the process of every kernel on the machine by the
// connection file on its command line. PIDs are host PIDs (this /proc's);
// the connection file names the kernel the same way in every namespace.
// Forked children (multiprocessing, DataLoader workers) repeat their
// kernel's command line: the kernel is the outermost such process, and
// vramguard's own processes, which also carry the command line, are skipped
// but mark the kernel as supervised.
func KernelProcs(src ProcSource) (map[string]KernelProc, error) {
	all, err := src.All()
	if err != nil {
		return nil, err
	}
	byPID := make(map[int]procfs.Proc, len(all))
	for _, p := range all {
		byPID[p.PID] = p
	}
	type cand struct {
		id  string
		sup bool
	}
	cands := map[int]cand{}
	for _, p := range all {
		argv, err := src.Cmdline(p.PID)
		if err != nil || len(argv) == 0 {
			continue
		}
		if id, ok := ConnectionKernelID(argv); ok {
			cands[p.PID] = cand{id: id, sup: isSupervisor(p.Comm, argv)}
		}
	}
	out := map[string]KernelProc{}
	pids := make([]int, 0, len(cands))
	for pid := range cands {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		c := cands[pid]
		if c.sup {
			continue
		}
		// Skip a forked child of the same kernel.
		if pc, ok := cands[byPID[pid].PPID]; ok && pc.id == c.id && !pc.sup {
			continue
		}
		kp := KernelProc{PID: pid, Tree: procfs.Tree(all, pid)}
		for a := byPID[pid].PPID; a > 1; a = byPID[a].PPID {
			if ac, ok := cands[a]; ok && ac.sup && ac.id == c.id {
				kp.Supervised = true
				break
			}
			if _, ok := byPID[a]; !ok {
				break
			}
		}
		if st, err := src.Status(pid); err == nil && len(st.NSpid) > 1 {
			kp.NSpid, kp.ContainerPID = st.NSpid, st.NSpid[len(st.NSpid)-1]
		}
		if prev, ok := out[c.id]; ok && byPID[prev.PID].StartTicks > byPID[pid].StartTicks {
			continue
		}
		out[c.id] = kp // the newest wins while a restart overlaps the old process
	}
	return out, nil
}

// EnvSource is implemented by a ProcSource that can also read a process's
// environment and working directory (procfs.FS cannot; LiveProcs can).
type EnvSource interface {
	Environ(pid int) ([]string, error)
	Cwd(pid int) (string, error)
}

// LiveProcs is the live /proc with environments and working directories.
type LiveProcs struct{ procfs.FS }

// Environ reads /proc/<pid>/environ (readable for one's own processes, or
// as root).
func (LiveProcs) Environ(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		out = append(out, string(kv))
	}
	return out, nil
}

// Cwd reads /proc/<pid>/cwd.
func (LiveProcs) Cwd(pid int) (string, error) {
	return os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
}

// ProcNotebook is the notebook a kernel process serves, from the
// JPY_SESSION_NAME jupyter_server puts in its environment: a path relative
// to the server's root, while the kernel starts in the notebook's
// directory. "" when the environment cannot be read or has no session.
func ProcNotebook(src EnvSource, pid int) string {
	env, err := src.Environ(pid)
	if err != nil {
		return ""
	}
	var session string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JPY_SESSION_NAME="); ok {
			session = v
		}
	}
	if session == "" || filepath.IsAbs(session) {
		return session
	}
	cwd, err := src.Cwd(pid)
	if err != nil || cwd == "" {
		return session
	}
	return filepath.Join(cwd, filepath.Base(session))
}
