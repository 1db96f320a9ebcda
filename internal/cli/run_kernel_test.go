package cli

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
				if sock == agentSock || filepath.Base(sock) != pm.RunID+".sock" {
					t.Errorf("%s = %q, want the supervisor's socket for run %s", probe.EnvSocket, sock, pm.RunID)
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
