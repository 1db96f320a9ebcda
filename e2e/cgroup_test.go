package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestMemoryLimitRefusedWithoutCgroup: an unprivileged user with no cgroup to
// create and no systemd user manager gets a clear refusal (exit 3), never an
// uncapped job.
func TestMemoryLimitRefusedWithoutCgroup(t *testing.T) {
	t.Parallel()
	testbin.NeedRoot(t, "this test drops to user nobody")
	dir := testbin.SharedDir(t, "vramguard-nobody-")
	os.Chmod(dir, 0o777) // nobody writes its home and marker here
	exe := testbin.CopyBinary(t, bin, dir)
	marker := filepath.Join(dir, "ran")
	cmd := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--reset-env",
		exe, "--home", filepath.Join(dir, "home"), "run", "--memory-limit", "100m", "--", "sh", "-c", "touch "+marker)
	out, err := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if code != 3 {
		t.Fatalf("exit %d (%v), want 3:\n%s", code, err, out)
	}
	if !strings.Contains(string(out), "no memory cgroup can be created") || strings.Contains(string(out), "goroutine") {
		t.Errorf("unclear refusal:\n%s", out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the job ran uncapped")
	}
}

// TestHostOOMUnderAncestorLimit: a job whose own cgroup sets no limit but an
// ancestor does (a SLURM job's step or task cgroup under the job's limit, a
// process inside a limited slice) is killed by that limit; the post-mortem
// says host_oom_killed and measures the job against the ancestor's limit,
// not against the machine's RAM.
func TestHostOOMUnderAncestorLimit(t *testing.T) {
	t.Parallel()
	testbin.NeedRoot(t, "this test creates memory cgroups")
	const limit = 160 << 20
	parent, err := cgroup.Create("vramguard-e2e-ancestor", limit)
	if err != nil || parent.Dir == "" {
		t.Fatalf("create the limited parent cgroup: %v", err)
	}
	child := filepath.Join(parent.Dir, "task")
	// Registered before anything can fail, so a failed test leaves no
	// cgroup behind.
	t.Cleanup(func() {
		cgroup.KillDir(child, 5e9)
		os.Remove(child)
		parent.Kill(5e9)
		os.Remove(parent.Dir)
	})
	if parent.Version == 2 {
		// the child gets memory accounting of its own; the parent holds no
		// process, so it may hand the controller down
		if err := os.WriteFile(filepath.Join(parent.Dir, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			t.Fatalf("delegate memory to the child: %v", err)
		}
	}
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	// vramguard starts inside the child, as a job launched in a limited
	// slice or SLURM step would
	script := fmt.Sprintf("echo $$ > %s/cgroup.procs && exec %s --home %s run --sample-interval 100ms -- %s %s",
		child, bin, e.home, python, job("host_oom.py"))
	r := testbin.Run(t, testbin.Command(t, e.environ(), "sh", "-c", script))
	if r.Code != 137 {
		t.Fatalf("exit %d, want 137 (the job OOM-killed)\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	pm := e.explain("last")
	if pm["reason"] != "host_oom_killed" {
		t.Fatalf("reason %v, want host_oom_killed; evidence %v", pm["reason"], pm["evidence"])
	}
	ev := strings.Join(strs(pm["evidence"]), "\n")
	if !strings.Contains(ev, "of its 160 MiB limit (cgroup)") {
		t.Errorf("the evidence does not measure the job against its ancestor's 160 MiB limit:\n%s", ev)
	}
}
