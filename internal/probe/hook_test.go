package probe

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/timeline"
)

// attemptHook is a Hook on a fresh socket in attempt 1 of job 500, and a
// connection to its socket (closed when the test ends).
func attemptHook(t *testing.T) (*Hook, net.Conn) {
	t.Helper()
	l := listen(t)
	h := NewHook("/probe", l, Options{Socket: l.Path()}, nil)
	h.Started(1, 500)
	c, err := net.Dial("unix", l.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return h, c
}

// The supervisor's probe: env per attempt, progress from steps, and a
// post-mortem that waits for the attempt's connections to close.
func TestHook(t *testing.T) {
	l := listen(t)
	clock := time.Unix(1000, 0)
	now := func() time.Time { return clock }
	h := NewHook("/probe", l, Options{Socket: l.Path(), RunDir: "/r"}, now)

	env := h.Env([]string{"A=1"}, 3)
	if !strings.Contains(strings.Join(env, " "), "VRAMGUARD_ATTEMPT=3") || env[0] != "A=1" {
		t.Errorf("env %v", env)
	}
	h.Started(1, 500)
	if !h.Progress().IsZero() {
		t.Error("progress before any step")
	}
	c, err := net.Dial("unix", l.Path())
	if err != nil {
		t.Fatal(err)
	}
	snap := testdata(t, "snapshot_oom.pickle")
	lines := []string{
		`{"v":1,"type":"hello","pid":500,"ts":1}`,
		`{"v":1,"type":"sample","pid":500,"ts":2,"optimizer_steps":4,"rss_bytes":10}`,
		fmt.Sprintf(`{"v":1,"type":"oom","pid":500,"ts":3,"source":"observer","device":0,"snapshot_path":%q}`, snap),
		`{"v":1,"type":"ckpt","pid":500,"ts":4,"path":"/c/x.pt","bytes":9,"ok":true,"seconds":0.1}`,
	}
	if _, err := c.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	for !h.open[500] {
		h.cond.Wait()
	}
	h.mu.Unlock()
	if p := h.PIDs(); len(p) != 1 || p[0] != 500 {
		t.Errorf("PIDs %v", p)
	}
	// Finish must wait for this connection to close: close it from another
	// goroutine once Finish is waiting (it cannot return before).
	pm := &postmortem.Postmortem{}
	done := make(chan struct{})
	go func() {
		h.Finish(pm)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Finish returned while the probe connection was open")
	case <-time.After(300 * time.Millisecond):
	}
	c.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Finish did not return after the connection closed")
	}
	if h.Progress() != clock {
		t.Errorf("progress %v, want %v", h.Progress(), clock)
	}
	if lt, ok := h.LastCheckpoint(); !ok || lt != clock {
		t.Errorf("last checkpoint %v %v", lt, ok)
	}
	got := pm.Probe
	if got == nil || got.Samples != 1 || got.OptimizerSteps != 4 || len(got.Checkpoints) != 1 || got.OOM == nil || got.OOM.SnapshotPath != snap {
		t.Errorf("probe section: %+v", got)
	}
	if sites := pm.AllocationSites; len(sites) != 4 || sites[0].Line != 63 || pm.AllocationSitesError != "" {
		t.Errorf("sites %+v (%s)", sites, pm.AllocationSitesError)
	}

	// A new attempt starts a fresh summary; with no probe messages the
	// post-mortem's probe stays null.
	h.Started(2, 600)
	pm2 := &postmortem.Postmortem{}
	h.Finish(pm2)
	if pm2.Probe != nil || pm2.AllocationSites != nil {
		t.Errorf("attempt without probe messages: probe %+v sites %v", pm2.Probe, pm2.AllocationSites)
	}
}

// FillSample sums PyTorch's figures over the job's processes and devices
// (each process's newest report), drops a process once it disconnects, and
// leaves the figures absent when nothing reports CUDA statistics.
func TestHookFillSample(t *testing.T) {
	l := listen(t)
	h := NewHook("/probe", l, Options{Socket: l.Path(), RunDir: "/r"}, nil)
	h.Started(1, 700)
	var s timeline.Sample
	h.FillSample(&s)
	if s.Allocated != nil || s.Reserved != nil || s.Step != nil {
		t.Fatalf("figures before any report: %+v", s)
	}
	dial := func(lines ...string) net.Conn {
		c, err := net.Dial("unix", l.Path())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
			t.Fatal(err)
		}
		return c
	}
	stats := func(pid, seq int, dev int, alloc, reserved int64) string {
		return fmt.Sprintf(`{"v":1,"type":"sample","pid":%d,"ts":%d,"optimizer_steps":%d,"cuda":[{"device":%d,"allocated_bytes":%d,"reserved_bytes":%d,"inactive_split_bytes":5,"num_alloc_retries":1,"total_bytes":8000}]}`,
			pid, seq, seq, dev, alloc, reserved)
	}
	a := dial(`{"v":1,"type":"hello","pid":701,"ts":1}`, stats(701, 2, 0, 100, 200), stats(701, 3, 0, 300, 400))
	b := dial(`{"v":1,"type":"hello","pid":702,"ts":1}`, stats(702, 7, 1, 1000, 2000))
	defer a.Close()
	waitFill := func(want uint64) timeline.Sample {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var s timeline.Sample
			h.FillSample(&s)
			if s.Allocated != nil && *s.Allocated == want {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("allocated %v, want %d", s.Allocated, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s = waitFill(1300)
	// two devices of 8000 bytes each: one per process
	if *s.Reserved != 2400 || *s.InactiveSplit != 10 || *s.AllocRetries != 2 || s.Step == nil || *s.Step != 7 || s.GPUTotal == nil || *s.GPUTotal != 16000 {
		t.Errorf("sum over processes: reserved %d inactive %d retries %d step %v", *s.Reserved, *s.InactiveSplit, *s.AllocRetries, s.Step)
	}
	b.Close()
	waitFill(300)
}

// StackSignal makes a probed process write all its threads' stacks to
// RunDir/stacks-<attempt>-<pid>.txt and carry on.
func TestStackSignal(t *testing.T) {
	t.Parallel()
	runDir := t.TempDir()
	dir := t.TempDir()
	script := filepath.Join(dir, "job.py")
	code := "import sys\ndef wait_for_work():\n    print('ready', flush=True)\n    sys.stdin.read()\nwait_for_work()\nprint('done')\n"
	if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	env := Env(baseEnv(), probeDir(t), Options{Socket: l.Path(), RunDir: runDir, Attempt: 3})
	cmd := pythonCmd(t, env, script)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stdout)
	if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("read %q %v", line, err)
	}
	if err := cmd.Process.Signal(StackSignal); err != nil {
		t.Fatal(err)
	}
	// the job carries on once its stacks are written (as a stalled job the
	// supervisor asks does); ending it while Python writes them is another
	// matter (faulthandler writes from the signal handler)
	stacks := filepath.Join(runDir, fmt.Sprintf("stacks-3-%d.txt", cmd.Process.Pid))
	testbin.WaitFor(t, 30*time.Second, "the job's stacks", func() bool {
		b, _ := os.ReadFile(stacks)
		return strings.Contains(string(b), "in <module>")
	})
	stdin.Close()
	rest, _ := io.ReadAll(rd)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("job did not survive the stack signal: %v (%v)", err, cmd.ProcessState.Sys().(syscall.WaitStatus))
	}
	if string(rest) != "done\n" {
		t.Errorf("job output after the signal %q", rest)
	}
	b, err := os.ReadFile(stacks)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "in wait_for_work") || !strings.Contains(string(b), "Thread 0x") {
		t.Errorf("stacks:\n%s", b)
	}
	collect(t, l, cmd.Process.Pid)
}

// KernelShutdown reads the attempt's kernel_shutdown message, once the
// attempt's connections have closed (the message may still be on its way
// when the kernel's process has ended).
func TestHookKernelShutdown(t *testing.T) {
	tests := []struct {
		name           string
		lines          []string
		asked, restart bool
	}{
		{"none", nil, false, false},
		{"restart", []string{`{"v":1,"type":"kernel_shutdown","pid":500,"ts":2,"restart":true}`}, true, true},
		{"shutdown", []string{`{"v":1,"type":"kernel_shutdown","pid":500,"ts":2}`}, true, false},
		{"the first counts", []string{`{"v":1,"type":"kernel_shutdown","pid":500,"ts":2,"restart":true}`,
			`{"v":1,"type":"kernel_shutdown","pid":500,"ts":3}`}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, c := attemptHook(t)
			if _, err := c.Write([]byte(`{"v":1,"type":"hello","pid":500,"ts":1}` + "\n")); err != nil {
				t.Fatal(err)
			}
			h.mu.Lock()
			for !h.open[500] {
				h.cond.Wait()
			}
			h.mu.Unlock()
			// The rest is sent as the connection closes, after the call.
			go func() {
				time.Sleep(200 * time.Millisecond)
				for _, line := range tt.lines {
					c.Write([]byte(line + "\n"))
				}
				c.Close()
			}()
			asked, restart := h.KernelShutdown()
			if asked != tt.asked || restart != tt.restart {
				t.Errorf("KernelShutdown() = %v, %v; want %v, %v", asked, restart, tt.asked, tt.restart)
			}
			// A new attempt forgets it.
			h.Started(2, 600)
			if asked, _ := h.KernelShutdown(); asked {
				t.Error("attempt 2 has attempt 1's shutdown request")
			}
		})
	}
}
