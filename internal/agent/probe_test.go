package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestMain doubles as a helper: with VRAMGUARD_TEST_DIAL=PATH the test
// binary only tries to connect to that socket and write a probe message,
// and exits 0 (written), 13 (permission denied) or 1 (other error). The
// socket test runs it as another user.
func TestMain(m *testing.M) {
	if p := os.Getenv("VRAMGUARD_TEST_DIAL"); p != "" {
		c, err := net.Dial("unix", p)
		if errors.Is(err, syscall.EACCES) {
			os.Exit(13)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(c, `{"v":1,"type":"hello","pid":%d}`+"\n", os.Getpid())
		c.Close()
		os.Exit(0)
	}
	if p := os.Getenv("VRAMGUARD_TEST_API"); p != "" {
		os.Exit(apiHelper(p, os.Getenv("VRAMGUARD_TEST_API_REQ")))
	}
	testbin.Require(testbin.Torch)
	code := m.Run()
	removeTestUsers()
	os.Exit(code)
}

// TestProbeSocketRefusesOtherUsers listens where every user can reach the
// directory, so only the socket's own mode (0600) stands between another
// user and the agent; a helper running as nobody must be refused, and the
// same helper as the owner let in.
func TestProbeSocketRefusesOtherUsers(t *testing.T) {
	// t.TempDir's parent is private to root; this directory must be one
	// that nobody can enter, so only the socket's mode is tested.
	dir := testbin.SharedDir(t, "vramguard-probe-")
	sock := filepath.Join(dir, "probe.sock")
	l, err := probe.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("probe socket mode %v, want a socket with 0600", st.Mode())
	}
	testbin.NeedRoot(t, "this test switches to the user nobody")
	// The test binary may sit in a directory nobody cannot enter; run a copy.
	bin := copyTestBinary(t, dir)
	run := func(uid uint32) int {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "VRAMGUARD_TEST_DIAL="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("helper: %v %s", err, out)
		}
		return 0
	}
	if code := run(65534); code != 13 {
		t.Fatalf("a process of user nobody connecting to the probe socket: exit %d, want 13 (permission denied)", code)
	}
	if code := run(0); code != 0 {
		t.Fatalf("the owner's helper could not connect: exit %d", code)
	}
	select {
	case m := <-l.Messages():
		if m.Type != probe.TypeHello || m.PID != m.PeerPID {
			t.Fatalf("owner's message %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's message never arrived")
	}
}

// TestProbeReportsOnlyAboutItself sends, over a real connection, a sample
// claiming to be another process (refused) and one about itself (used).
func TestProbeReportsOnlyAboutItself(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "p.sock")
	l, err := probe.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := newRig(t, twoJobs, Config{})
	r.ag.cfg.Probes = l.Messages()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { r.ag.followProbes(ctx); close(done) }()

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sample := `{"v":1,"type":"sample","pid":%d,"cuda":[{"device":0,"allocated_bytes":%d,"reserved_bytes":%d}]}` + "\n"
	fmt.Fprintf(c, sample, 960001, 111, 222)      // the trainer's PID: not ours
	fmt.Fprintf(c, sample, os.Getpid(), 333, 444) // our own
	c.Close()
	// The listener reports the disconnect last, after both samples.
	deadline := time.After(10 * time.Second)
	for {
		r.ag.mu.RLock()
		n := r.ag.probeRej + r.ag.probeMsgs
		r.ag.mu.RUnlock()
		if n >= 3 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("messages not processed (%d)", n)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	if r.ag.probeRej != 1 {
		t.Fatalf("refused %d messages, want 1 (the one about pid 960001)", r.ag.probeRej)
	}
	if _, _, ok := r.ag.cfg.Registry.ProbeMemory(960001); ok {
		t.Fatal("a probe reported about another process and was believed")
	}
	// Our own sample was accepted, then forgotten at the disconnect.
	if _, _, ok := r.ag.cfg.Registry.ProbeMemory(os.Getpid()); ok {
		t.Fatal("figures kept after the probe disconnected")
	}
	if r.ag.probeMsgs != 2 {
		t.Fatalf("accepted %d messages, want 2 (own sample, disconnect)", r.ag.probeMsgs)
	}
}

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
