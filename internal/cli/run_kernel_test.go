package cli

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/supervise"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestMain lets `vramguard run`, run in-process by the tests, start its
// shim: the supervisor re-executes its own binary (this test binary) as
// `__shim -- COMMAND`, as cmd/vramguard does through Main.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimCommand {
		os.Exit(supervise.RunShim(os.Args[2:]))
	}
	testbin.Require(testbin.Torch, testbin.IPython, testbin.IPyKernel, testbin.JupyterServer)
	os.Exit(m.Run())
}

// kernelDump is what the fake kernel writes: its pid, arguments and
// environment, as the supervisor handed them to it.
const kernelDump = `import json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump({"pid": os.getpid(), "argv": sys.argv[2:], "env": dict(os.environ)}, f)
`

// TestKernelProbeEnv runs `run --kernel` twice for one kernel id, as
// Jupyter does when a kernel dies and is restarted: a first process that
// dies, then a Python "kernel" that dumps what it was started with. The
// kernel's probe must report to its own supervisor (the probe hook's
// socket, which the post-mortem proves by listing the kernel's pid) and, on
// a connection of its own, to the agent's socket the supervisor's
// environment names (VRAMGUARD_AGENT_SOCKET), and the probe must be on
// PYTHONPATH once. --no-probe leaves the probe, the notice variable and the
// notice extension out, and nothing reaches the agent.
func TestKernelProbeEnv(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to stand in for a kernel: %v", err)
	}
	tests := []struct {
		name  string
		flags []string
		probe bool
	}{
		{"probe", nil, true},
		{"no probe", []string{"--no-probe"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			// The agent's socket, also named in the supervisor's own
			// environment as a Jupyter server started under vramguard's
			// probe would pass it on.
			agentSock := probe.DefaultSocket(home)
			agent, err := net.ListenUnix("unix", &net.UnixAddr{Name: agentSock, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer agent.Close()
			t.Setenv(probe.EnvSocket, agentSock)
			t.Setenv(envSessionName, "nb.ipynb") // no polling of Jupyter servers for the notebook
			t.Setenv(envPreviousDeath, "")       // restored after the test; run --kernel sets it
			os.Unsetenv(envPreviousDeath)

			conn := filepath.Join(home, "runtime", "kernel-k1.json")
			run := func(jsonOut bool, job ...string) (string, string, int) {
				args := []string{"--home", home, "run", "--kernel", "--gpu-backend", "none"}
				if jsonOut {
					args = append(args, "--json")
				}
				args = append(append(append(args, tt.flags...), "--"), job...)
				return runJupyterCLI(t, nil, append(args, "-f", conn)...)
			}
			if _, errs, code := run(false, "/bin/sh", "-c", "exit 7", "sh"); code != 7 {
				t.Fatalf("first kernel: exit %d, want 7; stderr %q", code, errs)
			}
			dump := filepath.Join(home, "dump.json")
			out, errs, code := run(true, python, "-c", kernelDump, dump, "ipykernel_launcher")
			if code != 0 {
				t.Fatalf("restarted kernel: exit %d; stderr %q", code, errs)
			}
			if !strings.Contains(errs, "vramguard: kernel k1: the previous kernel of this notebook died") {
				t.Errorf("no notice in the server's log: %q", errs)
			}
			var pm struct {
				RunID   string `json:"run_id"`
				Attempt int    `json:"attempt"`
				Probe   *struct {
					PIDs []int `json:"pids"`
				} `json:"probe"`
			}
			if err := json.Unmarshal([]byte(out), &pm); err != nil {
				t.Fatalf("post-mortem: %v\n%s", err, out)
			}
			b, err := os.ReadFile(dump)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				PID  int               `json:"pid"`
				Argv []string          `json:"argv"`
				Env  map[string]string `json:"env"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			env := got.Env
			probeDir := filepath.Join(home, "probe", "probe-"+probe.Digest())
			onPath := 0
			for _, p := range filepath.SplitList(env["PYTHONPATH"]) {
				if p == probeDir {
					onPath++
				}
			}
			notice, noticed := env[envPreviousDeath]
			extension := slices.Contains(got.Argv, noticeExtension)
			if pm.Attempt != 2 {
				t.Errorf("the restarted kernel is attempt %d of its run, want 2", pm.Attempt)
			}

			if !tt.probe {
				if pm.Probe != nil || onPath != 0 || env[probe.EnvHz] != "" || noticed || extension {
					t.Errorf("--no-probe: probe %+v, probe dir %d times on PYTHONPATH %q, %s=%q, notice %v %q, extension %v",
						pm.Probe, onPath, env["PYTHONPATH"], probe.EnvHz, env[probe.EnvHz], noticed, notice, extension)
				}
			} else {
				if pm.Probe == nil || !slices.Contains(pm.Probe.PIDs, got.PID) {
					t.Errorf("the supervisor heard nothing from the kernel's probe (pid %d): %+v", got.PID, pm.Probe)
				}
				sock := env[probe.EnvSocket]
				// the supervisor's own socket, whose name (every user reads
				// it in /proc/net/unix) gives the run's id away nowhere
				if sock == agentSock || !strings.HasSuffix(sock, ".sock") || strings.Contains(sock, pm.RunID) || strings.Contains(sock, pm.RunID[len(pm.RunID)-6:]) {
					t.Errorf("%s = %q, want the supervisor's socket for run %s, not named by it", probe.EnvSocket, sock, pm.RunID)
				}
				if onPath != 1 {
					t.Errorf("probe dir %s is %d times on PYTHONPATH %q, want once", probeDir, onPath, env["PYTHONPATH"])
				}
				for k, want := range map[string]string{
					probe.EnvRunID:   pm.RunID,
					probe.EnvAttempt: "2",
					probe.EnvRunDir:  supervise.RunDir(home, pm.RunID),
				} {
					if env[k] != want {
						t.Errorf("%s = %q, want %q", k, env[k], want)
					}
				}
				if !strings.Contains(notice, "died") || !strings.Contains(notice, "explain "+pm.RunID) || !extension {
					t.Errorf("notice %q, extension in %q", notice, got.Argv)
				}
			}
			// The kernel has exited: had its probe dialled the agent, the
			// connection would be waiting in the backlog already.
			agent.SetDeadline(time.Now().Add(50 * time.Millisecond))
			c, err := agent.Accept()
			if err == nil {
				c.Close()
			}
			if dialled := err == nil; dialled != tt.probe {
				t.Errorf("the kernel's probe connected to the agent's socket: %v, want %v", dialled, tt.probe)
			}
			if tt.probe && env[probe.EnvAgentSocket] != agentSock {
				t.Errorf("%s = %q, want the agent's socket %q", probe.EnvAgentSocket, env[probe.EnvAgentSocket], agentSock)
			}
		})
	}
}

// kernelAskedToShutDown stands in for a kernel that its client asks to shut down
// or restart (the probe's kernel_shutdown message, as vramguard/shutdown.py
// sends it from ipykernel's do_shutdown), then either exits or waits for
// the client's SIGTERM. It counts its starts in a file.
const kernelAskedToShutDown = `import sys, time
from vramguard import _probe
ask, end, ready, starts = sys.argv[1:5]
with open(starts, "a") as f:
    f.write("x")
if ask != "none":
    _probe.event("kernel_shutdown", restart=(ask == "restart"))
open(ready, "w").close()
if end == "exit":
    sys.exit(0)
time.sleep(60)
`

// TestKernelClientShutdown: Jupyter's client asks a kernel to shut down or
// restart over the control channel, and sends SIGTERM when the kernel has
// not ended after half of its shutdown_wait_time (2.5 s by default; an
// idle ipykernel takes 1-1.5 s, longer on a loaded machine). The verdict is
// what was asked (restarted, or success for a shutdown), SIGTERM or not; a
// SIGTERM without a request is still a stop. The supervisor never starts
// the restarted kernel itself: its client does. Not parallel: the test
// signals its own process, where the supervisor runs.
func TestKernelClientShutdown(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to stand in for a kernel: %v", err)
	}
	t.Setenv(envSessionName, "nb.ipynb")
	tests := []struct {
		ask, end, reason string
	}{
		{"restart", "sigterm", "restarted"},
		{"restart", "exit", "restarted"},
		{"shutdown", "sigterm", "success"},
		{"none", "sigterm", "interrupted"},
	}
	for _, tt := range tests {
		t.Run(tt.ask+" "+tt.end, func(t *testing.T) {
			home := t.TempDir()
			ready, starts := filepath.Join(home, "ready"), filepath.Join(home, "starts")
			type res struct {
				out, errs string
				code      int
			}
			done := make(chan res, 1)
			go func() {
				out, errs, code := runJupyterCLI(t, nil, "--home", home, "run", "--kernel", "--json", "--gpu-backend", "none",
					"--", python, "-c", kernelAskedToShutDown, tt.ask, tt.end, ready, starts, "ipykernel_launcher", "-f", filepath.Join(home, "tmpk1.json"))
				done <- res{out, errs, code}
			}()
			if tt.end == "sigterm" {
				testbin.WaitFor(t, 60*time.Second, "the kernel to be ready", func() bool {
					_, err := os.Stat(ready)
					return err == nil
				})
				// The client's SIGTERM reaches the kernel's process: here,
				// vramguard's supervisor.
				syscall.Kill(os.Getpid(), syscall.SIGTERM)
			}
			var r res
			select {
			case r = <-done:
			case <-time.After(90 * time.Second):
				t.Fatal("run --kernel did not end")
			}
			var pm struct {
				Reason  string `json:"reason"`
				Attempt int    `json:"attempt"`
			}
			if err := json.Unmarshal([]byte(r.out), &pm); err != nil {
				t.Fatalf("post-mortem: %v\nstdout %q\nstderr %q", err, r.out, r.errs)
			}
			if pm.Reason != tt.reason {
				t.Errorf("reason %q, want %q\nstderr:\n%s", pm.Reason, tt.reason, r.errs)
			}
			if b, _ := os.ReadFile(starts); len(b) != 1 || pm.Attempt != 1 {
				t.Errorf("the kernel started %d times, the post-mortem is attempt %d: want one start, attempt 1", len(b), pm.Attempt)
			}
		})
	}
}
