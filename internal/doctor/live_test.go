package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// These tests run the real probe and the real filesystem on this machine.
// They need Debian's python3-torch (/usr/bin/python3 with torch) and a
// python3 on PATH; on a machine without them they fail, by design.

func TestProbeDebianTorch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := ExecPython{}.Probe(ctx, "/usr/bin/python3")
	if err != nil {
		t.Fatalf("probe /usr/bin/python3 (needs Debian's python3-torch): %v", err)
	}
	if !tr.Importable || tr.Version == "" {
		t.Fatalf("torch not importable by /usr/bin/python3: %+v", tr)
	}
	if tr.CUDAInitialized {
		t.Error("the probe initialised CUDA")
	}
	if tr.Executable == "" || tr.PythonVersion == "" {
		t.Errorf("missing interpreter facts: %+v", tr)
	}
	// Debian's python3-torch is a CPU-only build; report it as one.
	f := &facts{env: &Env{}, torch: tr, gpuErr: NoNVML{Root: t.TempDir()}.err()}
	r := checkTorchImport(f)
	if r.Status != OK || !strings.Contains(r.Evidence, "torch "+tr.Version) {
		t.Errorf("pytorch.import = %s %q", r.Status, r.Evidence)
	}
	if tr.CUDA == "" && !strings.Contains(r.Evidence, "CPU-only build") {
		t.Errorf("a CPU build must say so: %q", r.Evidence)
	}
}

func (n NoNVML) err() error { _, err := n.Snapshot(context.Background()); return err }

// TestProbeWithoutTorch uses an interpreter that has no torch: a copy of
// Debian's python3 run with -S (no site packages), whichever python3 comes
// first on PATH (a machine may have none but Debian's). A copy, not a link
// or a venv: doctor knows an interpreter by the file it runs, and the copy
// is not /usr/bin/python3's.
func TestProbeWithoutTorch(t *testing.T) {
	dir := t.TempDir()
	real, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatal(err)
	}
	py := testbin.CopyExecutable(t, real, filepath.Join(dir, "python3-copy"))
	// -S and an empty PYTHONPATH make sure this interpreter cannot see a
	// torch.
	wrapper := testbin.WriteFile(t, dir, "python", "#!/bin/sh\nexec "+py+" -S \"$@\"\n", 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := ExecPython{Env: []string{"PATH=/usr/bin:/bin", "PYTHONPATH="}}.Probe(ctx, wrapper)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Importable || !strings.Contains(tr.ImportError, "No module named 'torch'") {
		t.Fatalf("want torch not importable, got %+v", tr)
	}
	r := checkTorchImport(&facts{env: &Env{Getenv: func(k string) string {
		if k == "PATH" {
			return "/usr/bin"
		}
		return ""
	}}, opts: Options{Python: wrapper}, torch: tr})
	if r.Status != Fail || !strings.Contains(r.Evidence, "torch not importable by") {
		t.Errorf("pytorch.import = %s %q", r.Status, r.Evidence)
	}
	// /usr/bin/python3 has Debian's torch, so doctor points there.
	if !strings.Contains(r.Fix, "--python /usr/bin/python3") {
		t.Errorf("fix does not suggest /usr/bin/python3: %q", r.Fix)
	}
}

// TestProbeTimeoutKillsTheGroup: a hanging interpreter (and a child it
// started) is killed when the deadline passes.
func TestProbeTimeoutKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "python")
	pidfile := filepath.Join(dir, "child.pid")
	script := "#!/bin/sh\nsleep 300 &\necho $! > " + pidfile + "\nwait\n"
	if err := os.WriteFile(hang, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ExecPython{}.Probe(ctx, hang)
	if !errors.Is(err, ErrProbeTimeout) {
		t.Fatalf("err = %v, want ErrProbeTimeout", err)
	}
	// a probe that waited for the interpreter's child would wait out its
	// sleep of 300 s
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("probe returned after %s: it waited for the hanging child", d)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("the fake interpreter did not start its child: %v", err)
	}
	pid := strings.TrimSpace(string(b))
	// The grandchild was in the probe's process group and got SIGKILL; the
	// kernel may take a moment to deliver it, so allow up to 2 s for it to
	// be gone (or a zombie awaiting its reaper).
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("child %s survived the timeout: %s", pid, st)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProbeBadInterpreter(t *testing.T) {
	_, err := ExecPython{}.Probe(context.Background(), "/nonexistent/python")
	if err == nil || errors.Is(err, ErrProbeTimeout) {
		t.Fatalf("err = %v", err)
	}
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "python")
	if err := os.WriteFile(notJSON, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := (ExecPython{}).Probe(context.Background(), notJSON); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("err = %v", err)
	}
}

func TestTryWriteDir(t *testing.T) {
	dir := t.TempDir()
	r, err := TryWriteDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !r.RenameKept {
		t.Error("rename within a local directory must keep the inode")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("left files behind: %v", ents)
	}
	if _, err := TryWriteDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// TestLiveMachine runs every check against this machine. Without an NVIDIA
// driver the GPU checks are n/a, never failures.
func TestLiveMachine(t *testing.T) {
	cwd, _ := os.Getwd()
	env := Env{Getenv: os.Getenv, Python: ExecPython{}, Cwd: cwd, Statfs: LiveStatfs("")}
	rep := Run(context.Background(), env, Options{Python: "/usr/bin/python3", Dir: t.TempDir(), PythonTimeout: time.Minute})
	nvml, _ := rep.Get("gpu.nvml")
	for _, r := range rep.Checks {
		if r.Group == "gpu" && nvml.Status == NA && r.Status != NA {
			t.Errorf("%s = %s without NVML", r.ID, r.Status)
		}
		if r.Evidence == "" {
			t.Errorf("%s has no evidence", r.ID)
		}
	}
	if imp, _ := rep.Get("pytorch.import"); imp.Status != OK {
		t.Errorf("pytorch.import = %s: %s", imp.Status, imp.Evidence)
	}
	for _, id := range []string{"storage.writable", "storage.space"} {
		if r, _ := rep.Get(id); r.Status != OK {
			t.Errorf("%s = %s: %s", id, r.Status, r.Evidence)
		}
	}
}
