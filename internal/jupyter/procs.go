package jupyter

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/users"
)

// ProcSource is where kernel processes are looked up; procfs.FS is the real
// one.
type ProcSource interface {
	All() ([]procfs.Proc, error)
	Cmdline(pid int) ([]string, error)
	Status(pid int) (procfs.Status, error)
}

// KernelProc is the process running one kernel, with its descendants.
type KernelProc struct {
	PID int
	// NSpid is the PID in each namespace, host first, when the kernel runs
	// in a nested PID namespace (a container); ContainerPID is the innermost.
	NSpid        []int
	ContainerPID int
	// UID is the kernel process's owner (users.NoUID when its status
	// cannot be read).
	UID int
	// Tree is the kernel and its descendants (workers, subprocesses).
	Tree []procfs.Proc
	// Supervised is set when vramguard runs the kernel (run --kernel).
	Supervised bool
	// RunID is the supervising run, from VRAMGUARD_RUN_ID in the kernel's
	// environment ("" when unsupervised or the environment is unreadable).
	RunID string
	// ConnFile is the connection file the kernel's command line names, an
	// absolute path as the kernel sees it ("" when it cannot be told).
	ConnFile string
	// Others are processes of other users whose command lines name the
	// same kernel (each user's newest): a command line is anyone's to
	// write, so which is the kernel is its server's user's to say (Of).
	Others []KernelProc
}

// RSS sums the resident memory of the kernel and its descendants.
func (k KernelProc) RSS() uint64 {
	var n uint64
	for _, p := range k.Tree {
		n += p.RSSBytes
	}
	return n
}

// ExeSource is implemented by a ProcSource that can tell which executable
// file a process runs (LiveProcs can; procfs.FS cannot).
type ExeSource interface {
	// Exe identifies the file /proc/PID/exe points at (the same string for
	// the same file, whatever it is named or wherever it is mounted).
	Exe(pid int) (string, error)
}

// runIDVar is set by vramguard's supervisor in the environment of the job
// it starts: a kernel that has it runs under `vramguard run --kernel`.
const runIDVar = "VRAMGUARD_RUN_ID"

// launches reports whether argv runs the kernel's command given after a
// "--": a launcher such as vramguard's supervisor, which is no kernel even
// while the kernel it starts is not there yet (the first moments of a
// supervisor, before it names itself vramguard).
func launches(argv []string) bool {
	for i, a := range argv {
		if a == "--" {
			_, ok := attrib.ConnectionFile(argv[i+1:])
			return ok
		}
	}
	return false
}

// looksLikeVramguard reports whether a process is named vramguard: every
// vramguard process names itself so (its comm, readable by every user),
// and older ones are named so by their file.
func looksLikeVramguard(comm string, argv []string) bool {
	if comm == "vramguard" {
		return true
	}
	return len(argv) > 0 && filepath.Base(argv[0]) == "vramguard"
}

// KernelProcs finds the process of every kernel on the machine by the
// connection file on its command line. PIDs are host PIDs (this /proc's);
// the connection file names the kernel the same way in every namespace.
//
// Several processes carry a kernel's command line: vramguard's supervisor
// and its shim (`vramguard run --kernel -- python -m ipykernel_launcher -f
// ...` and `vramguard __shim -- ...`) above the kernel, and the children the
// kernel forked (multiprocessing, DataLoader workers) below it. Along such a
// chain the kernel is the innermost process that runs another executable
// than the one above it: the supervisor and shim run one file, the kernel
// another (Python), and forked children the kernel's. The executable is read
// from /proc/PID/exe (where it cannot be, another user's process without
// root, the process's name stands for it), so a vramguard binary under any
// name is recognised; a process named vramguard (as every vramguard process
// names itself) is never the kernel, nor is a process that passes the
// kernel's command on after a "--". A kernel below a wrapper is supervised
// when its environment carries a run id of its own, which vramguard's
// supervisor sets (or when the environment cannot be read).
func KernelProcs(src ProcSource) (map[string]KernelProc, error) {
	all, err := src.All()
	if err != nil {
		return nil, err
	}
	byPID := make(map[int]procfs.Proc, len(all))
	for _, p := range all {
		byPID[p.PID] = p
	}
	exeSrc, _ := src.(ExeSource)
	type cand struct {
		id    string
		ident string // which executable, for telling wrappers from kernels
		// vramguard: the process names itself so (cli.Main), or is named so
		vramguard bool
		// launcher: the kernel's command follows a "--" (vramguard run
		// --kernel ... -- python ...; other launchers alike)
		launcher bool
		file     string // the connection file, absolute ("" unknown)
	}
	cands := map[int]cand{}
	ids := connIDs{src: src, seen: map[string]string{}}
	for _, p := range all {
		argv, err := src.Cmdline(p.PID)
		if err != nil || len(argv) == 0 {
			continue
		}
		id, ok := ids.of(p.PID, argv)
		if !ok || !ids.holds(p.PID, argv) {
			continue
		}
		c := cand{id: id, vramguard: looksLikeVramguard(p.Comm, argv), launcher: launches(argv)}
		c.file, _ = ids.file(p.PID, argv)
		if exeSrc != nil {
			if exe, err := exeSrc.Exe(p.PID); err == nil && exe != "" {
				c.ident = "exe:" + exe
			}
		}
		if c.ident == "" && c.vramguard {
			c.ident = "name:vramguard"
		}
		cands[p.PID] = c
	}
	// parent is the nearest ancestor that carries the same kernel's command
	// line, 0 for none.
	parent := func(pid int) int {
		id := cands[pid].id
		for a := byPID[pid].PPID; a > 1; a = byPID[a].PPID {
			if ac, ok := cands[a]; ok && ac.id == id {
				return a
			}
			if _, ok := byPID[a]; !ok {
				break
			}
		}
		return 0
	}
	// A head starts a new executable along its chain: the outermost process,
	// or one that runs another file than its parent. The kernel is the
	// innermost head; the heads above it are wrappers.
	head := map[int]bool{}
	for pid, c := range cands {
		pp := parent(pid)
		head[pid] = pp == 0 || cands[pp].ident != c.ident
	}
	// A process that is vramguard by its name or runs this very binary is
	// no kernel, even alone (a supervisor whose kernel is still starting,
	// or has just died).
	self := ""
	if exeSrc != nil {
		if exe, err := exeSrc.Exe(os.Getpid()); err == nil && exe != "" {
			self = "exe:" + exe
		}
	}
	wrapper := map[int]bool{}
	for pid, c := range cands {
		if c.vramguard || c.launcher || (self != "" && c.ident == self) {
			wrapper[pid] = true
		}
	}
	for pid := range cands {
		if !head[pid] {
			continue
		}
		for a := parent(pid); a != 0; a = parent(a) {
			if head[a] {
				wrapper[a] = true
			}
		}
	}
	envSrc, _ := src.(EnvSource)
	out := map[string]KernelProc{}
	pids := make([]int, 0, len(cands))
	for pid := range cands {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		if !head[pid] || wrapper[pid] {
			continue
		}
		c := cands[pid]
		kp := KernelProc{PID: pid, Tree: procfs.Tree(all, pid), ConnFile: c.file}
		if parent(pid) != 0 {
			kp.Supervised = true
			if envSrc != nil {
				if env, err := envSrc.Environ(pid); err == nil {
					// The supervisor sets a run id of its own; one the
					// outermost wrapper has as well was inherited (a
					// server that itself runs under vramguard).
					outer := pid
					for a := parent(pid); a != 0; a = parent(a) {
						outer = a
					}
					inherited := ""
					if oenv, err := envSrc.Environ(outer); err == nil {
						inherited = envValue(oenv, runIDVar)
					}
					if id := envValue(env, runIDVar); id != "" && id != inherited {
						kp.RunID = id
					}
					kp.Supervised = kp.RunID != ""
				}
			}
		}
		kp.UID = users.NoUID
		if st, err := src.Status(pid); err == nil {
			kp.UID = st.UID
			if len(st.NSpid) > 1 {
				kp.NSpid, kp.ContainerPID = st.NSpid, st.NSpid[len(st.NSpid)-1]
			}
		}
		prev, ok := out[c.id]
		if !ok {
			out[c.id] = kp
			continue
		}
		// One process per owner, the newest while a restart overlaps the
		// old one; processes of other owners that name the same kernel
		// are kept aside (Others) for the caller to tell which is the
		// kernel's (the one of its server's user).
		group := append([]KernelProc{prev}, prev.Others...)
		prev.Others = nil
		placed := false
		for i, g := range group {
			if g.UID == kp.UID {
				if byPID[g.PID].StartTicks <= byPID[kp.PID].StartTicks {
					group[i] = kp
				}
				placed = true
			}
		}
		if !placed {
			group = append(group, kp)
		}
		newest := 0
		for i, g := range group {
			if byPID[g.PID].StartTicks > byPID[group[newest].PID].StartTicks {
				newest = i
			}
		}
		head := group[newest]
		head.Others = append(append([]KernelProc{}, group[:newest]...), group[newest+1:]...)
		out[c.id] = head
	}
	return out, nil
}

// Of is the process among k and k.Others owned by uid; ok is false when
// none is.
func (k KernelProc) Of(uid int) (KernelProc, bool) {
	for _, c := range append([]KernelProc{k}, k.Others...) {
		if c.UID == uid {
			c.Others = nil
			return c, true
		}
	}
	return KernelProc{}, false
}

// ConnSource is implemented by a ProcSource that can read the connection
// files kernels name (LiveProcs can). Without it only kernels with a
// server's `kernel-<id>.json` are found.
type ConnSource interface {
	ReadConnection(file string) (Connection, error)
}

// connIDs finds the kernel a process's command line names, reading each
// connection file once per scan.
type connIDs struct {
	src  ProcSource
	seen map[string]string // absolute file -> kernel id ("" for not a kernel)
}

// of returns the kernel id of a command line's connection file: the
// server's id for `kernel-<id>.json`, else (for a file of any other name,
// nbclient's or an editor's) the id KernelID gives when the file reads as a
// connection file. Another program's `-f config.json` is no kernel.
func (c *connIDs) of(pid int, argv []string) (string, bool) {
	file, ok := attrib.ConnectionFile(argv)
	if !ok {
		return "", false
	}
	if id, ok := attrib.ServerKernelID(file); ok {
		return id, true
	}
	if !strings.HasSuffix(file, ".json") {
		return "", false
	}
	if file, ok = c.file(pid, argv); !ok {
		return "", false
	}
	if id, ok := c.seen[file]; ok {
		return id, id != ""
	}
	id := ""
	if cs, ok := c.src.(ConnSource); ok {
		if conn, err := cs.ReadConnection(file); err == nil {
			id = KernelID(file, &conn)
		}
	}
	c.seen[file] = id
	return id, id != ""
}

// file is the connection file a command line names, made absolute with
// the process's working directory; ok is false when there is none or a
// relative one cannot be resolved.
func (c *connIDs) file(pid int, argv []string) (string, bool) {
	file, ok := attrib.ConnectionFile(argv)
	if !ok {
		return "", false
	}
	if filepath.IsAbs(file) {
		return file, true
	}
	es, ok := c.src.(EnvSource)
	if !ok {
		return "", false
	}
	cwd, err := es.Cwd(pid)
	if err != nil || cwd == "" {
		return "", false
	}
	return filepath.Join(cwd, file), true
}

// FileOwnerSource is implemented by a ProcSource that can tell who owns a
// file as a process sees it (LiveProcs can: through /proc/PID/root, so a
// container's own files).
type FileOwnerSource interface {
	FileOwner(pid int, file string) (uid int, ok bool)
}

// FileOwner is the owner of file (an absolute path as pid sees it), not
// following a final symlink; ok is false when it cannot be read.
func (LiveProcs) FileOwner(pid int, file string) (int, bool) {
	st, err := os.Lstat(filepath.Join("/proc", strconv.Itoa(pid), "root", file))
	if err != nil {
		return 0, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(sys.Uid), true
}

// holds reports whether the connection file a command line names can be
// the process's: it is the process's user's file, or who owns it cannot
// be told (no FileOwnerSource, a file gone or out of reach). A process of
// one user naming another user's connection file (a kernel's id is in
// `ps`) is no kernel.
func (c *connIDs) holds(pid int, argv []string) bool {
	fo, ok := c.src.(FileOwnerSource)
	if !ok {
		return true
	}
	file, ok := c.file(pid, argv)
	if !ok {
		return true
	}
	owner, ok := fo.FileOwner(pid, file)
	if !ok {
		return true
	}
	st, err := c.src.Status(pid)
	return err == nil && st.UID == owner
}

// ReadConnection reads a kernel's connection file (one's own kernels', or
// any as root).
func (LiveProcs) ReadConnection(file string) (Connection, error) { return ReadConnection(file) }

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, key+"="); ok {
			v = s
		}
	}
	return v
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

// Exe identifies the executable of pid by the device and inode of
// /proc/<pid>/exe (readable for one's own processes, or as root).
func (LiveProcs) Exe(pid int) (string, error) {
	st, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil {
		return "", err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("no inode for the executable of %d", pid)
	}
	return fmt.Sprintf("%d:%d", sys.Dev, sys.Ino), nil
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
	session := envValue(env, "JPY_SESSION_NAME")
	if session == "" || filepath.IsAbs(session) {
		return session
	}
	cwd, err := src.Cwd(pid)
	if err != nil || cwd == "" {
		return session
	}
	return filepath.Join(cwd, filepath.Base(session))
}
