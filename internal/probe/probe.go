// Package probe carries vramguard's in-process Python probe and its Go side.
//
// The probe is a small pure-Python package (py/, embedded in the binary) that
// `vramguard run` writes out (Install) and puts first on the job's PYTHONPATH
// (Env). Python then imports its sitecustomize in every interpreter of the
// job: the main process, forked DataLoader workers and any subprocess. Each
// connects to a Unix socket (Listen), and best effort to a second one, the
// agent's (Options.AgentSocket), and reports JSON lines: allocator
// statistics from torch.cuda.memory_stats, host RSS, optimizer steps,
// torch.save events and CUDA OOMs (wire format: docs/PROBE.md). Summary folds
// those messages into the "probe" object of `explain --json`;
// TopAllocationSites reads the memory snapshot dumped at an OOM.
//
// The probe must never change what the job does: it never initialises CUDA,
// never prints, never raises into the job, and a missing socket leaves the job
// byte-for-byte as it would be without vramguard. Nothing in this package
// prints either.
package probe

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

//go:embed py/sitecustomize.py py/vramguard/*.py
var pyFS embed.FS

// Protocol is the wire-format version the embedded probe speaks ("v").
const Protocol = 1

// StackSignal is the signal the probe registers faulthandler on: all threads'
// Python stacks go to RunDir/stacks-<pid>.txt when it arrives. Send it to the
// pids seen in "hello" messages, not to the process group: a non-Python
// process in the group would die of it.
const StackSignal = syscall.SIGUSR2

// MaxHz is the highest sample rate the probe accepts.
const MaxHz = 20

// Environment variables the probe reads.
const (
	EnvSocket      = "VRAMGUARD_PROBE_SOCKET"
	EnvHz          = "VRAMGUARD_PROBE_HZ"
	EnvRunDir      = "VRAMGUARD_RUN_DIR"
	EnvOOMSnapshot = "VRAMGUARD_OOM_SNAPSHOT"
	EnvAtomicSave  = "VRAMGUARD_ATOMIC_SAVE"
	EnvRunID       = "VRAMGUARD_RUN_ID"
	EnvAttempt     = "VRAMGUARD_ATTEMPT"
	// EnvAgentSocket names a second socket that gets the same messages,
	// best effort: the machine-wide agent's, for a job whose
	// EnvSocket is its supervisor's (see AgentSocketFor).
	EnvAgentSocket = "VRAMGUARD_AGENT_SOCKET"
)

// AgentSocketName is the socket, under the vramguard state directory, that
// `%load_ext vramguard` connects to when no VRAMGUARD_PROBE_SOCKET is set.
const AgentSocketName = "probe.sock"

// Options configure the probe in a job's processes.
type Options struct {
	Socket      string  // unix socket path the probe connects to
	Hz          float64 // sample rate, default 1, max 20
	RunDir      string  // OOM summaries/snapshots and stack dumps are written here
	OOMSnapshot bool    // record memory history (bounded) and dump it at OOM
	AtomicSave  bool    // torch.save to a path: stage, fsync, rename
	RunID       string
	// Attempt, when above 0, goes into the names of the files the probe
	// writes: RunDir/stacks-<attempt>-<pid>.txt and
	// RunDir/oom-<attempt>-<pid>-<n>.{txt,pickle}; without it they are
	// stacks-<pid>.txt and oom-<pid>-<n>.*.
	Attempt int
	// AgentSocket, when set, is a second socket the probe sends the same
	// messages to, best effort: dialled from the sampler thread without
	// waiting, tried again every 30 s while missing or dead, and never
	// allowed to slow the job (a full buffer drops messages). Each process
	// connects itself, so the agent's peer-pid check still holds.
	AgentSocket string
}

// Files returns the embedded probe's files, relative to the probe directory.
func Files() map[string][]byte {
	out := map[string][]byte{}
	_ = fs.WalkDir(pyFS, "py", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := pyFS.ReadFile(p)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, "py/")] = b
		return nil
	})
	return out
}

// Digest identifies the embedded probe's content.
func Digest() string {
	files := Files()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

const installedMarker = ".complete"

// Install writes the embedded probe into dir/probe-<digest> and returns that
// directory, the one to put on PYTHONPATH. It is idempotent and safe to run
// concurrently: the files are written to a private directory that is renamed
// into place, and a directory already there with the same digest is reused.
func Install(dir string) (string, error) {
	target := filepath.Join(dir, "probe-"+Digest())
	if _, err := os.Stat(filepath.Join(target, installedMarker)); err == nil {
		return target, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("install probe: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".probe-tmp-")
	if err != nil {
		return "", fmt.Errorf("install probe: %w", err)
	}
	defer os.RemoveAll(tmp)
	for name, b := range Files() {
		p := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", fmt.Errorf("install probe: %w", err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return "", fmt.Errorf("install probe: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, installedMarker), []byte(Digest()+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("install probe: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("install probe: %w", err)
	}
	if err := os.Rename(tmp, target); err != nil {
		// Another installer got there first (rename onto a non-empty
		// directory fails); its copy has the same content.
		if _, serr := os.Stat(filepath.Join(target, installedMarker)); serr == nil {
			return target, nil
		}
		return "", fmt.Errorf("install probe in %s: %w", target, err)
	}
	return target, nil
}

// Env returns env with the probe directory prepended to PYTHONPATH and the
// probe's variables set (replacing any already there). EnvAgentSocket is set
// only when o.AgentSocket is, and an inherited one is always removed. It
// does not modify env.
func Env(env []string, probeDir string, o Options) []string {
	set := map[string]string{
		EnvSocket:      o.Socket,
		EnvHz:          strconv.FormatFloat(clampHz(o.Hz), 'g', -1, 64),
		EnvRunDir:      o.RunDir,
		EnvOOMSnapshot: boolEnv(o.OOMSnapshot),
		EnvAtomicSave:  boolEnv(o.AtomicSave),
		EnvRunID:       o.RunID,
		EnvAttempt:     strconv.Itoa(max(o.Attempt, 0)),
	}
	pythonPath := probeDir
	out := make([]string, 0, len(env)+len(set)+2)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; ours || k == EnvAgentSocket {
			continue
		}
		if k == "PYTHONPATH" {
			if v != "" {
				pythonPath = probeDir + string(os.PathListSeparator) + v
			}
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "PYTHONPATH="+pythonPath)
	for _, k := range []string{EnvSocket, EnvHz, EnvRunDir, EnvOOMSnapshot, EnvAtomicSave, EnvRunID, EnvAttempt} {
		out = append(out, k+"="+set[k])
	}
	if o.AgentSocket != "" {
		out = append(out, EnvAgentSocket+"="+o.AgentSocket)
	}
	return out
}

// AgentSocketFor is the socket a process would report to if no supervisor
// redirected its probe, given its environment (getenv) and the vramguard
// state directory home: an inherited EnvAgentSocket (the process already
// runs under a supervisor that knew the agent, as a Jupyter server under
// `vramguard run` does for its kernels), else an inherited EnvSocket (a
// user's pointer to an agent listening elsewhere, `serve --probe-socket`),
// else the agent's default socket under home. The socket need not exist:
// the probe tries it again every 30 s, so an agent started later is found.
func AgentSocketFor(getenv func(string) string, home string) string {
	if s := getenv(EnvAgentSocket); s != "" {
		return s
	}
	if s := getenv(EnvSocket); s != "" {
		return s
	}
	if s := SharedSocket(getenv); isSocket(s) {
		return s // a machine-wide agent takes every user's probes
	}
	return DefaultSocket(home)
}

// SharedDirDefault is where a machine-wide agent (`serve --shared`) puts
// the sockets every user connects to; EnvSharedDir moves it.
const SharedDirDefault = "/run/vramguard"

// EnvSharedDir names another directory for the shared agent's sockets.
const EnvSharedDir = "VRAMGUARD_SHARED_DIR"

// SharedDir is the directory of the machine-wide agent's sockets.
func SharedDir(getenv func(string) string) string {
	if d := getenv(EnvSharedDir); filepath.IsAbs(d) {
		return d
	}
	return SharedDirDefault
}

// SharedSocket is the machine-wide agent's probe socket.
func SharedSocket(getenv func(string) string) string {
	return filepath.Join(SharedDir(getenv), AgentSocketName)
}

// SharedAPISocket is the machine-wide agent's API socket, where each
// user's commands ask it (as themselves, by peer credentials).
func SharedAPISocket(getenv func(string) string) string {
	return filepath.Join(SharedDir(getenv), "api.sock")
}

func isSocket(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&os.ModeSocket != 0
}

func clampHz(hz float64) float64 {
	if !(hz > 0) {
		return 1
	}
	return min(hz, MaxHz)
}

func boolEnv(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// RemoveEmptyStackFiles deletes the empty stacks-*.txt files that
// processes which never got StackSignal leave in runDir (a process that ends
// through os._exit, as multiprocessing workers do, cannot remove its own).
func RemoveEmptyStackFiles(runDir string) error {
	matches, err := filepath.Glob(filepath.Join(runDir, "stacks-*.txt"))
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.Size() == 0 {
			if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// DefaultSocket is the agent's probe socket under the state directory home.
func DefaultSocket(home string) string { return filepath.Join(home, AgentSocketName) }
