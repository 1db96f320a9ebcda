package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReasons runs one real job per reason code and checks the post-mortem.
func TestReasons(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	tests := []struct {
		reason   string
		args     []string
		exit     int
		evidence string // a substring some evidence line must hold
		check    func(t *testing.T, pm map[string]any)
	}{
		{reason: "success", args: []string{"sh", "-c", "echo all good"}, exit: 0},
		{reason: "exit_error", args: []string{"sh", "-c", "echo something went wrong >&2; exit 3"}, exit: 3, evidence: "exit status 3"},
		{reason: "python_exception", args: []string{python, "-c", "import json; json.loads('{bad')"}, exit: 1, evidence: "JSONDecodeError",
			check: func(t *testing.T, pm map[string]any) {
				if pm["exception_type"] != "json.decoder.JSONDecodeError" {
					t.Errorf("exception_type = %v", pm["exception_type"])
				}
			}},
		{reason: "cuda_oom", args: []string{python, job("cuda_oom_2x.py")}, exit: 1, evidence: "tried to allocate 2 GiB on GPU 0",
			check: func(t *testing.T, pm map[string]any) {
				oom := pm["oom"].(map[string]any)
				want := map[string]float64{"tried_bytes": 2 << 30, "gpu": 0, "total_bytes": 84986665370, "free_bytes": 1138166333,
					"allocated_bytes": 76450417869, "reserved_unallocated_bytes": 6818260582}
				for k, v := range want {
					if oom[k] != v {
						t.Errorf("oom.%s = %v, want %v", k, oom[k], v)
					}
				}
				if oom["fragmented"] != true {
					t.Error("6.35 GiB reserved-unallocated against a 2 GiB request should be flagged as fragmentation")
				}
				if !strings.Contains(strings.Join(strs(pm["advice"]), " "), "expandable_segments:True") {
					t.Error("fragmentation advice missing")
				}
			}},
		{reason: "cuda_oom", args: []string{python, job("cuda_oom_1x.py")}, exit: 1, evidence: "20.00 MiB",
			check: func(t *testing.T, pm map[string]any) {
				oom := pm["oom"].(map[string]any)
				if oom["allocated_bytes"] != float64(16063177687) || oom["free_bytes"] != float64(10223616) {
					t.Errorf("1.x numbers: %v", oom)
				}
			}},
		{reason: "cuda_oom", args: []string{python, job("messages.py"), "cublas"}, exit: 1, evidence: "cuBLAS"},
		{reason: "host_oom_killed", args: []string{"--memory-limit", "100m", python, job("host_oom.py")}, exit: 137, evidence: "oom_kill counter rose"},
		{reason: "killed", args: []string{"sh", "-c", "echo working; sleep 0.5; kill -9 $$"}, exit: 137, evidence: "SIGKILL",
			check: func(t *testing.T, pm map[string]any) {
				if !strings.Contains(strings.Join(strs(pm["evidence"]), "\n"), "peak host memory of the job") {
					t.Error("killed must say how close memory was to its limit")
				}
			}},
		{reason: "shm_exhausted", args: []string{python, job("messages.py"), "shm"}, exit: 1, evidence: "Bus error"},
		{reason: "shm_exhausted", args: []string{"sh", "-c", "kill -BUS $$"}, exit: 135, evidence: "SIGBUS"},
		{reason: "dataloader_worker_died", args: []string{python, job("dataloader_died.py")}, exit: 1, evidence: "exited unexpectedly"},
		{reason: "nccl_error", args: []string{python, job("messages.py"), "nccl"}, exit: 1, evidence: "NCCL error"},
		{reason: "cuda_error", args: []string{python, job("messages.py"), "cuda_error"}, exit: 1, evidence: "illegal memory access"},
		{reason: "cuda_fork_error", args: []string{python, job("messages.py"), "fork"}, exit: 1, evidence: "forked subprocess"},
		{reason: "cuda_env_error", args: []string{python, job("cuda_env.py")}, exit: 1, evidence: "Torch not compiled with CUDA enabled"},
		{reason: "corrupt_checkpoint", args: []string{python, job("corrupt_ckpt.py"), filepath.Join(tmp, "c.pt")}, exit: 1, evidence: "central directory"},
		{reason: "disk_full", args: []string{python, job("disk_full.py")}, exit: 1, evidence: "No space left on device"},
		{reason: "segfault", args: []string{python, job("segfault.py")}, exit: 139, evidence: "SIGSEGV"},
	}
	for _, tt := range tests {
		t.Run(tt.reason+"/"+filepath.Base(tt.args[len(tt.args)-1]), func(t *testing.T) {
			e := newEnv(t)
			var args []string
			if tt.args[0] == "--memory-limit" {
				args = append([]string{"run", "--sample-interval", "100ms", "--memory-limit", tt.args[1], "--"}, tt.args[2:]...)
			} else {
				args = append([]string{"run", "--sample-interval", "100ms", "--"}, tt.args...)
			}
			r := e.run(args...)
			if r.code != tt.exit {
				t.Errorf("exit status %d, want %d\nstderr: %s", r.code, tt.exit, r.stderr)
			}
			pm := e.explain("last")
			if pm["reason"] != tt.reason {
				t.Fatalf("reason %v, want %s\nevidence: %v\nstderr: %s", pm["reason"], tt.reason, pm["evidence"], r.stderr)
			}
			if pm["exit_code"] != float64(tt.exit) {
				t.Errorf("exit_code %v, want %d", pm["exit_code"], tt.exit)
			}
			if tt.evidence != "" && !strings.Contains(strings.Join(strs(pm["evidence"]), "\n"), tt.evidence) {
				t.Errorf("no evidence mentions %q: %q", tt.evidence, pm["evidence"])
			}
			if tt.reason != "success" {
				if len(strs(pm["advice"])) == 0 {
					t.Error("no advice")
				}
				if !strings.Contains(r.stderr, "post-mortem") || !strings.Contains(r.stderr, tt.reason) {
					t.Errorf("no post-mortem on the terminal:\n%s", r.stderr)
				}
			}
			if tt.check != nil {
				tt.check(t, pm)
			}
		})
	}
}

// TestInterruptedAndStalled covers the reasons that vramguard itself causes.
func TestInterruptedAndStalled(t *testing.T) {
	t.Parallel()
	t.Run("interrupted", func(t *testing.T) {
		e := newEnv(t)
		cmd, _, se := e.start("run", "--", "sh", "-c", "echo started; sleep 60")
		waitFor(t, 10*time.Second, "job output", func() bool { return strings.Contains(e.run("logs", "last").stdout, "started") })
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		if got := cmd.ProcessState.ExitCode(); got != 130 && got != 143 {
			t.Errorf("exit %d after SIGINT to the job's sh, want 130 (or 143)", got)
		}
		if pm := e.explain("last"); pm["reason"] != "interrupted" {
			t.Errorf("reason %v, want interrupted\n%s", pm["reason"], se)
		}
	})
	t.Run("stalled", func(t *testing.T) {
		e := newEnv(t)
		r := e.run("run", "--stall-timeout", "1s", "--sample-interval", "100ms", "--", "sh", "-c", "echo waiting; sleep 60")
		pm := e.explain("last")
		if pm["reason"] != "stalled" || r.code != 137 {
			t.Errorf("reason %v exit %d, want stalled 137", pm["reason"], r.code)
		}
	})
	t.Run("lost", func(t *testing.T) {
		e := newEnv(t)
		cmd, _, _ := e.start("run", "--", "sleep", "60")
		waitFor(t, 10*time.Second, "the run to be recorded", func() bool { return strings.Contains(e.run("runs").stdout, "running") })
		syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		waitFor(t, 15*time.Second, "lost", func() bool { return strings.Contains(e.run("runs").stdout, "lost") })
		if pm := e.explain("last"); pm["reason"] != "lost" {
			t.Errorf("reason %v, want lost", pm["reason"])
		}
	})
}
