package doctor

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

//go:embed probe.py
var probeScript string

// Torch is what the probe learns from one Python interpreter.
type Torch struct {
	Executable    string  `json:"executable"`
	PythonVersion string  `json:"python_version"`
	Prefix        string  `json:"prefix"`
	LDLibraryPath string  `json:"ld_library_path"`
	StartMethod   string  `json:"start_method"`
	Importable    bool    `json:"importable"`
	ImportError   string  `json:"import_error,omitempty"`
	ImportSeconds float64 `json:"import_seconds,omitempty"`
	Version       string  `json:"version,omitempty"`
	TorchFile     string  `json:"torch_file,omitempty"`
	// CUDA is torch.version.cuda: "" for a CPU-only (or ROCm) build.
	CUDA            string   `json:"cuda,omitempty"`
	HIP             string   `json:"hip,omitempty"`
	CUDNN           int      `json:"cudnn,omitempty"` // 8902 is 8.9.2; 0 none
	CUDNNError      string   `json:"cudnn_error,omitempty"`
	CUDAAvailable   bool     `json:"cuda_available"`
	DeviceCount     int      `json:"device_count"`
	CUDAInitialized bool     `json:"cuda_initialized"`
	CUDAError       string   `json:"cuda_error,omitempty"`
	CudartFiles     []string `json:"cudart_candidates"`
	CudartLoaded    []string `json:"cudart_loaded"`
}

// PythonRunner runs the torch probe with one interpreter.
type PythonRunner interface {
	Probe(ctx context.Context, python string) (*Torch, error)
}

// ExecPython runs the embedded probe script in a child process. The child
// gets its own process group so a hung `import torch` (a stuck NFS home, a
// driver in a bad state) is killed whole when ctx ends.
type ExecPython struct {
	// Env is the child's environment; nil means this process's.
	Env []string
}

// ErrProbeTimeout is returned when the probe did not finish in time.
var ErrProbeTimeout = errors.New("the torch probe did not finish in time")

var errNoPython = errors.New("no Python interpreter to probe")

// Probe implements PythonRunner.
func (x ExecPython) Probe(ctx context.Context, python string) (*Torch, error) {
	cmd := exec.CommandContext(ctx, python, "-c", probeScript)
	env := x.Env
	if env == nil {
		env = os.Environ()
	}
	// Ask torch to count devices through NVML instead of creating a CUDA
	// context, and not to spend time loading every kernel module.
	cmd.Env = append(env[:len(env):len(env)], "PYTORCH_NVML_BASED_CUDA_CHECK=1", "CUDA_MODULE_LOADING=LAZY", "PYTHONDONTWRITEBYTECODE=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", python, ErrProbeTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: %w: %s", python, err, lastLine(stderr.String()))
	}
	var t Torch
	if err := json.Unmarshal(stdout.Bytes(), &t); err != nil {
		return nil, fmt.Errorf("%s: probe output is not JSON (%v): %q", python, err, truncate(stdout.String(), 200))
	}
	return &t, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return truncate(s, 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// StaticPython returns a fixed probe result (fixtures, tests).
type StaticPython struct {
	Torch *Torch
	Err   error
}

// Probe implements PythonRunner.
func (s StaticPython) Probe(ctx context.Context, _ string) (*Torch, error) {
	if s.Err != nil {
		return nil, s.Err
	}
	return s.Torch, nil
}

// torchInterpreters lists other interpreters that appear to have torch
// installed, judged from files alone (no subprocess), so a missing torch can
// be answered with "try --python X". skip holds the paths already probed.
func torchInterpreters(env *Env, skip ...string) []string {
	skipped := map[string]bool{}
	for _, s := range skip {
		if s == "" {
			continue
		}
		skipped[s] = true
		if r, err := filepath.EvalSymlinks(env.path(s)); err == nil {
			skipped[r] = true
		}
	}
	var cands []string
	for _, d := range filepath.SplitList(env.getenv("PATH")) {
		if d != "" {
			cands = append(cands, filepath.Join(d, "python3"), filepath.Join(d, "python"))
		}
	}
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := env.getenv(v); p != "" {
			cands = append(cands, filepath.Join(p, "bin", "python"))
		}
	}
	cands = append(cands, "/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python")
	var out []string
	seen := map[string]bool{}
	for _, c := range cands {
		real, err := filepath.EvalSymlinks(env.path(c))
		if err != nil || skipped[c] || skipped[real] || seen[real] {
			continue
		}
		seen[real] = true
		if hasTorch(env, real) {
			out = append(out, c)
		}
	}
	return out
}

// hasTorch looks for torch/__init__.py where the interpreter at exe (a path
// under env.Root) would import it from.
func hasTorch(env *Env, exe string) bool {
	prefix := filepath.Dir(filepath.Dir(exe))
	pats := []string{
		filepath.Join(prefix, "lib", "python3*", "site-packages", "torch", "__init__.py"),
		filepath.Join(prefix, "lib", "python3*", "dist-packages", "torch", "__init__.py"),
		filepath.Join(prefix, "lib", "python3", "dist-packages", "torch", "__init__.py"),
	}
	if filepath.Base(prefix) == "usr" {
		local := filepath.Join(filepath.Dir(prefix), "usr", "local")
		pats = append(pats, filepath.Join(local, "lib", "python3*", "dist-packages", "torch", "__init__.py"))
	}
	for _, p := range pats {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return true
		}
	}
	return false
}
