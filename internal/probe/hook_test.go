package probe

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/supervise"
)

// The supervise.Hook: env per attempt, progress from steps, and a
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
	pm := &supervise.Postmortem{}
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
	var got struct {
		Samples        int   `json:"samples"`
		OptimizerSteps int64 `json:"optimizer_steps"`
		Checkpoints    []struct{ Path string }
		OOM            *struct {
			SnapshotPath string `json:"snapshot_path"`
		}
	}
	if err := json.Unmarshal(pm.Probe, &got); err != nil {
		t.Fatalf("%v: %s", err, pm.Probe)
	}
	if got.Samples != 1 || got.OptimizerSteps != 4 || len(got.Checkpoints) != 1 || got.OOM == nil || got.OOM.SnapshotPath != snap {
		t.Errorf("probe object: %s", pm.Probe)
	}
	var sites []Site
	if err := json.Unmarshal(pm.Extra["oom_allocation_sites"], &sites); err != nil || len(sites) != 4 || sites[0].Line != 63 {
		t.Errorf("sites %s (%v)", pm.Extra["oom_allocation_sites"], err)
	}

	// A new attempt starts a fresh summary; with no probe messages the
	// post-mortem's probe stays null.
	h.Started(2, 600)
	pm2 := &supervise.Postmortem{}
	h.Finish(pm2)
	if pm2.Probe != nil || pm2.Extra != nil {
		t.Errorf("attempt without probe messages: probe %s extra %v", pm2.Probe, pm2.Extra)
	}
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
	stdin.Close()
	rest, _ := io.ReadAll(rd)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("job did not survive the stack signal: %v (%v)", err, cmd.ProcessState.Sys().(syscall.WaitStatus))
	}
	if string(rest) != "done\n" {
		t.Errorf("job output after the signal %q", rest)
	}
	b, err := os.ReadFile(filepath.Join(runDir, fmt.Sprintf("stacks-3-%d.txt", cmd.Process.Pid)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "in wait_for_work") || !strings.Contains(string(b), "Thread 0x") {
		t.Errorf("stacks:\n%s", b)
	}
	collect(t, l, cmd.Process.Pid)
}
