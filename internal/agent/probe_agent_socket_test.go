package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/testbin"
)

// fakeAllocJob is a real Python process with Debian's (CPU-only) torch
// whose torch.cuda claims one initialised device with 3 GiB allocated and
// 4 GiB reserved, as a supervised training job on a GPU would report them.
// It prints its pid and runs until its stdin closes.
const fakeAllocJob = `import os, sys
import torch, torch.cuda

GiB = 1 << 30
stats = {"allocated_bytes.all.current": 3 * GiB, "allocated_bytes.all.peak": 3 * GiB,
         "reserved_bytes.all.current": 4 * GiB, "reserved_bytes.all.peak": 4 * GiB}
if hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
    torch._C._cuda_attach_out_of_memory_observer = lambda observer: None
torch.cuda.is_initialized = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.memory_stats = lambda device=None: dict(stats)
torch.cuda.mem_get_info = lambda device=None: (12 * GiB, 16 * GiB)
print(os.getpid(), flush=True)
sys.stdin.read()
`

// A supervised job's probe reports to its supervisor and, through
// VRAMGUARD_AGENT_SOCKET, to the agent: the agent shows the allocator
// figures the job's own process sent as the job's allocated and reserved
// bytes (API and metrics), next to NVML's figure, while the supervisor
// gets the same samples.
func TestAgentSocketAllocatedBytes(t *testing.T) {
	dir, err := os.MkdirTemp("", "vgag-") // short: unix socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	supL, err := probe.Listen(filepath.Join(dir, "sup.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer supL.Close()
	agentL, err := probe.Listen(filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer agentL.Close()
	supSamples := make(chan probe.Message, 4096)
	go func() {
		for m := range supL.Messages() {
			if m.Type == probe.TypeSample && len(m.CUDA) > 0 {
				select {
				case supSamples <- m:
				default:
				}
			}
		}
	}()

	probeDir, err := probe.Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := probe.Env([]string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir(), "OMP_NUM_THREADS=1"}, probeDir,
		probe.Options{Socket: supL.Path(), AgentSocket: agentL.Path(), Hz: 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Python(), "-c", fakeAllocJob)
	cmd.Env = env
	pipes := testbin.StartPiped(t, cmd)
	stderr := pipes.Stderr
	defer cmd.Wait()
	defer pipes.Stdin.Close()
	sc := bufio.NewScanner(pipes.Stdout)
	if !sc.Scan() {
		t.Fatalf("the job printed no pid\nstderr:\n%s", stderr.String())
	}
	pid, err := strconv.Atoi(sc.Text())
	if err != nil || pid != cmd.Process.Pid {
		t.Fatalf("job pid %q, started %d", sc.Text(), cmd.Process.Pid)
	}

	// NVML (simulated) sees the job's process holding 5 GiB.
	scenario := fmt.Sprintf(`{"name": "supervised", "duration": "1h",
	  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "16GiB", "util": 50}],
	  "processes": [{"pid": %d, "device": 0, "memory": "5GiB",
	    "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"], "rss": "2GiB"}}]}`, pid)
	r := newRig(t, scenario, Config{})
	r.runs.set(runOf{pid: pid, id: "r-agent", name: "train"})
	r.ag.cfg.Probes = agentL.Messages()
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.ag.followProbes(fctx); close(done) }()
	defer func() { stop(); <-done }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, ok := r.ag.cfg.Registry.ProbeMemory(pid); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no allocator figures from pid %d reached the agent\nstderr:\n%s", pid, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.step(1)

	const gib = 1 << 30
	var job *JobView
	snap := r.ag.Snapshot()
	for i := range snap.Jobs {
		if snap.Jobs[i].RootPID == pid {
			job = &snap.Jobs[i]
		}
	}
	if job == nil {
		t.Fatalf("no job rooted at pid %d: %+v", pid, snap.Jobs)
	}
	if job.Kind != "run" || job.RunID != "r-agent" || job.GPUBytes != 5*gib {
		t.Errorf("job %+v, want run r-agent with NVML's 5 GiB", job)
	}
	if job.Alloc == nil || *job.Alloc != 3*gib || job.Reserved == nil || *job.Reserved != 4*gib {
		t.Errorf("job allocated %v reserved %v, want the probe's 3 GiB and 4 GiB", job.Alloc, job.Reserved)
	}
	code, body := r.do("GET", "/api/v1/jobs", "", "")
	var api struct {
		Jobs []JobView `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(body), &api); err != nil || code != 200 {
		t.Fatalf("GET /api/v1/jobs: %d %v\n%s", code, err, body)
	}
	found := false
	for _, j := range api.Jobs {
		if j.RootPID == pid {
			found = true
			if j.Alloc == nil || *j.Alloc != 3*gib {
				t.Errorf("GET /api/v1/jobs: allocated_bytes %v, want %d", j.Alloc, 3*gib)
			}
		}
	}
	if !found {
		t.Errorf("GET /api/v1/jobs lacks the job:\n%s", body)
	}
	_, metrics := r.do("GET", "/metrics", "", "")
	var line string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "vramguard_job_torch_allocated_bytes{") && strings.Contains(l, `kind="run"`) {
			line = l
		}
	}
	if !strings.HasSuffix(line, " 3.221225472e+09") {
		t.Errorf("metrics: %q, want the run's torch allocated bytes 3 GiB", line)
	}

	select {
	case m := <-supSamples:
		if m.PeerPID != pid || m.CUDA[0].AllocatedBytes != 3*gib {
			t.Errorf("supervisor sample %+v from peer %d", m, m.PeerPID)
		}
	case <-time.After(30 * time.Second):
		t.Error("the supervisor got no sample with allocator figures")
	}
	r.ag.mu.RLock()
	rej := r.ag.probeRej
	r.ag.mu.RUnlock()
	if rej != 0 {
		t.Errorf("the agent refused %d probe messages", rej)
	}
}
