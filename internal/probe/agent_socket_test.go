package probe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// The agent socket (VRAMGUARD_AGENT_SOCKET): a job whose probe reports to its
// supervisor sends the same messages, best effort, to the machine-wide
// agent, each process over its own connection.

// Local helpers, so this file does not depend on where the package's
// shared test helpers live.

// jobCommand is name with args and env as its whole environment, in a fresh
// directory, killed if it still runs after two minutes or when t ends.
func jobCommand(t *testing.T, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	return cmd
}

type jobResult struct {
	Stdout, Stderr string
	Code, PID      int
}

// runJob runs cmd to its end; t fails only when it could not run at all.
func runJob(t *testing.T, cmd *exec.Cmd) jobResult {
	t.Helper()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := jobResult{Stdout: so.String(), Stderr: se.String()}
	if cmd.ProcessState != nil {
		r.Code, r.PID = cmd.ProcessState.ExitCode(), cmd.ProcessState.Pid()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %v: %v\nstderr:\n%s", cmd.Args, err, r.Stderr)
	}
	return r
}

// recorder drains a Listener into a slice, so a probe is never held up by a
// test that has not got round to reading yet.
type recorder struct {
	mu   sync.Mutex
	cond *sync.Cond
	msgs []Message
	done bool
}

func record(l *Listener) *recorder {
	r := &recorder{}
	r.cond = sync.NewCond(&r.mu)
	go func() {
		for m := range l.Messages() {
			r.mu.Lock()
			r.msgs = append(r.msgs, m)
			r.mu.Unlock()
			r.cond.Broadcast()
		}
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
		r.cond.Broadcast()
	}()
	return r
}

// agentWait is how long a recorder waits for what a test expects.
const agentWait = 30 * time.Second

// wait returns the messages once cond holds for them; it fails t after
// agentWait, or when the listener closed first.
func (r *recorder) wait(t *testing.T, what string, cond func([]Message) bool) []Message {
	t.Helper()
	timer := time.AfterFunc(agentWait, r.cond.Broadcast)
	defer timer.Stop()
	deadline := time.Now().Add(agentWait)
	r.mu.Lock()
	defer r.mu.Unlock()
	for !cond(r.msgs) {
		if r.done || time.Now().After(deadline) {
			for _, m := range r.msgs {
				b, _ := json.Marshal(m)
				t.Logf("%s peer=%d", b, m.PeerPID)
			}
			t.Fatalf("waited in vain for %s (%d messages)", what, len(r.msgs))
		}
		r.cond.Wait()
	}
	return slices.Clone(r.msgs)
}

// closed waits until the listener has been closed and returns everything
// it delivered.
func (r *recorder) closed(t *testing.T) []Message {
	t.Helper()
	return r.wait(t, "the listener to close", func([]Message) bool { return r.done })
}

// gone waits until every pid's connection has closed.
func (r *recorder) gone(t *testing.T, pids ...int) []Message {
	t.Helper()
	return r.wait(t, fmt.Sprintf("pids %v to disconnect", pids), func(ms []Message) bool {
		for _, p := range pids {
			if len(byType(ms, p, TypeDisconnect)) == 0 {
				return false
			}
		}
		return true
	})
}

// listenIn starts a Listener on name in a fresh short directory (socket
// paths are limited to 107 bytes) and closes it when t ends.
func listenIn(t *testing.T, dir, name string) *Listener {
	t.Helper()
	l, err := Listen(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func sockDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vga-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// jobEnv is a small fixed environment plus the probe's, for Debian's torch.
func jobEnv(t *testing.T, o Options, extra ...string) []string {
	t.Helper()
	dir, err := Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := append([]string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir(), "LANG=C.UTF-8", "OMP_NUM_THREADS=1"}, extra...)
	return Env(base, dir, o)
}

// bothSockets listens on a supervisor's socket and an agent's in a fresh
// directory, each recording what it hears, and returns them with Options
// that point a job's probe at both, sampling at 20 Hz.
func bothSockets(t *testing.T) (sup, agent *recorder, o Options) {
	t.Helper()
	dir := sockDir(t)
	supL, agentL := listenIn(t, dir, "sup.sock"), listenIn(t, dir, "agent.sock")
	return record(supL), record(agentL), Options{Socket: supL.Path(), AgentSocket: agentL.Path(), Hz: 20}
}

// checkSameStream checks that the agent heard pid say what the supervisor
// heard, from pid itself: hello first, then samples with the same content.
func checkSameStream(t *testing.T, pid int, sup, agent []Message) {
	t.Helper()
	var mine []Message
	for _, m := range agent {
		if m.PID == pid || m.PeerPID == pid {
			mine = append(mine, m)
		}
	}
	if len(mine) == 0 {
		t.Errorf("pid %d: the agent heard nothing", pid)
		return
	}
	if mine[0].Type != TypeHello {
		t.Errorf("pid %d: the agent's first message is %q, want hello", pid, mine[0].Type)
	}
	for _, m := range mine {
		if m.PeerPID != pid || m.PID != pid {
			t.Errorf("pid %d: agent message %q has pid %d from peer %d", pid, m.Type, m.PID, m.PeerPID)
		}
	}
	bySeq := map[int64]Message{}
	for _, m := range byType(sup, pid, TypeSample) {
		bySeq[m.Seq] = m
	}
	samples := byType(mine, pid, TypeSample)
	if len(samples) == 0 {
		t.Errorf("pid %d: the agent got no sample", pid)
	}
	for _, m := range samples {
		s, ok := bySeq[m.Seq]
		if !ok {
			t.Errorf("pid %d: sample %d reached the agent but not the supervisor", pid, m.Seq)
			continue
		}
		if s.RSSBytes != m.RSSBytes || s.OptimizerSteps != m.OptimizerSteps || !reflect.DeepEqual(s.CUDA, m.CUDA) || m.Dropped != 0 {
			t.Errorf("pid %d sample %d differs:\nsupervisor %+v\nagent      %+v", pid, m.Seq, s, m)
		}
	}
}

// A real CPU training loop with two forked DataLoader workers: every process
// reports to both sockets, each over its own connection (so the agent's
// peer-pid check holds), and the agent hears the same hello, samples,
// checkpoints and goodbye as the supervisor.
func TestAgentSocketTraining(t *testing.T) {
	t.Parallel()
	sup, agent, o := bothSockets(t)
	runDir := t.TempDir()
	o.RunDir = runDir
	env := jobEnv(t, o, "TRAIN_STEPS=24")
	r := runJob(t, jobCommand(t, env, testbin.Python(), testdata(t, "scripts/train_cpu.py"), runDir))
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("exit %d\nstderr:\n%s", r.Code, r.Stderr)
	}
	var rep trainReport
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil || len(rep.WorkerPIDs) != 2 {
		t.Fatalf("job report %q: %v", lines[len(lines)-1], err)
	}
	pids := append([]int{rep.PID}, rep.WorkerPIDs...)
	sm := sup.gone(t, pids...)
	am := agent.gone(t, pids...)
	for _, p := range pids {
		checkSameStream(t, p, sm, am)
	}
	for _, typ := range []string{TypeCkpt, TypeBye, TypeTorch} {
		if s, a := len(byType(sm, rep.PID, typ)), len(byType(am, rep.PID, typ)); s != a || s == 0 {
			t.Errorf("%s messages: supervisor %d, agent %d", typ, s, a)
		}
	}
	last := byType(am, rep.PID, TypeSample)
	if n := len(last); n == 0 || last[n-1].OptimizerSteps != 24 || rep.Steps != 24 {
		t.Errorf("the agent's last sample of the main process does not count the loop's %d steps", rep.Steps)
	}
	for _, ms := range [][]Message{sm, am} {
		if e := append(byType(ms, 0, TypeError), byType(ms, 0, TypeInvalid)...); len(e) > 0 {
			t.Errorf("errors: %+v", e)
		}
	}
}

// The allocator figures, through the fake torch.cuda of testdata/fakecuda:
// the agent gets the same per-device numbers as the supervisor, and the
// CUDA OOM event.
func TestAgentSocketCUDA(t *testing.T) {
	t.Parallel()
	sup, agent, o := bothSockets(t)
	o.RunDir = t.TempDir()
	env := jobEnv(t, o, "MODE=observer", "FAKECUDA_LOG="+filepath.Join(t.TempDir(), "fake.log"))
	r := runJob(t, jobCommand(t, env, testbin.Python(), testdata(t, "scripts/cuda_fake.py")))
	if r.Code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", r.Code, r.Stderr)
	}
	var rep struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(r.Stdout, "\n", 2)[0]), &rep); err != nil {
		t.Fatalf("job report %q: %v", r.Stdout, err)
	}
	sm := sup.gone(t, rep.PID)
	am := agent.gone(t, rep.PID)
	checkSameStream(t, rep.PID, sm, am)
	var withCUDA int
	for _, m := range byType(am, rep.PID, TypeSample) {
		if len(m.CUDA) > 0 && m.CUDA[0].AllocatedBytes > 0 && m.CUDA[0].ReservedBytes > 0 {
			withCUDA++
		}
	}
	if withCUDA == 0 {
		t.Errorf("no sample with allocator figures reached the agent")
	}
	so, ao := byType(sm, rep.PID, TypeOOM), byType(am, rep.PID, TypeOOM)
	if len(so) != 1 || len(ao) != 1 || !reflect.DeepEqual(so[0].CUDA, ao[0].CUDA) || ao[0].AllocBytes == nil {
		t.Errorf("oom events: supervisor %+v, agent %+v", so, ao)
	}
}

// No agent at the socket's path (nothing there, a socket nobody listens on,
// a file that is not a socket): the job prints and exits exactly as without
// the probe, and the supervisor hears everything.
func TestAgentSocketAbsent(t *testing.T) {
	t.Parallel()
	dir := sockDir(t)
	out := t.TempDir()
	script := testdata(t, "scripts/outputs.py")
	base := runJob(t, jobCommand(t, []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir(), "LANG=C.UTF-8", "OMP_NUM_THREADS=1"},
		testbin.Python(), script, out))
	if base.Code != 1 || !strings.Contains(base.Stderr, "ValueError: validation failed at 42") {
		t.Fatalf("baseline: exit %d\n%s", base.Code, base.Stderr)
	}
	refused := filepath.Join(dir, "refused.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: refused, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody listens: ECONNREFUSED
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, agent string }{
		{"missing", filepath.Join(dir, "missing.sock")},
		{"refused", refused},
		{"not a socket", regular},
		{"a directory that does not exist", "/nonexistent-vramguard/probe.sock"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			supL := listenIn(t, dir, fmt.Sprintf("sup%d.sock", i))
			sup := record(supL)
			env := jobEnv(t, Options{Socket: supL.Path(), AgentSocket: tc.agent, Hz: 20, RunDir: t.TempDir()})
			r := runJob(t, jobCommand(t, env, testbin.Python(), script, out))
			if r.Code != base.Code || r.Stdout != base.Stdout || r.Stderr != base.Stderr {
				t.Errorf("with the probe: exit %d\nstdout %q\nstderr %q\nwithout: exit %d\nstdout %q\nstderr %q",
					r.Code, r.Stdout, r.Stderr, base.Code, base.Stdout, base.Stderr)
			}
			ms := sup.gone(t, r.PID)
			for _, typ := range []string{TypeHello, TypeTorch, TypeCkpt, TypeBye} {
				if len(byType(ms, r.PID, typ)) != 1 {
					t.Errorf("the supervisor got %d %s messages, want 1", len(byType(ms, r.PID, typ)), typ)
				}
			}
			samples := byType(ms, r.PID, TypeSample)
			if len(samples) < 2 || samples[len(samples)-1].OptimizerSteps != 5 {
				t.Errorf("supervisor samples: %+v", samples)
			}
			if e := byType(ms, 0, TypeError); len(e) > 0 {
				t.Errorf("errors: %+v", e)
			}
		})
	}
}

// lateAgent drives the probe's retries: it shortens AGENT_RETRY_S (30 s in
// use) and reports each stage on stdout, waiting for a line on stdin
// between stages while the test starts, stops and restarts the agent.
const lateAgent = `import sys, time
from vramguard import _probe

p = _probe._p


def wait_for(cond, what):
    deadline = time.monotonic() + 30
    while not cond():
        if time.monotonic() > deadline:
            print("timed out waiting for " + what, file=sys.stderr)
            sys.exit(3)
        time.sleep(0.01)


def connected(other=None):
    a = p.agent
    return a is not None and not a.dead and a is not other


wait_for(lambda: p.agent_next > 0, "the first attempt")
print("absent", p.agent is None, flush=True)
_probe.AGENT_RETRY_S = 0.05
p.agent_next = time.monotonic()
sys.stdin.readline()
wait_for(connected, "the agent")
first = p.agent
print("connected", flush=True)
sys.stdin.readline()
wait_for(lambda: connected(first), "the restarted agent")
print("reconnected", flush=True)
sys.stdin.readline()
`

// An agent that starts after the job is found by the next attempt, and one
// that restarts is found again; each new connection starts with hello.
func TestAgentSocketLateAndRestarted(t *testing.T) {
	t.Parallel()
	dir := sockDir(t)
	sup := record(listenIn(t, dir, "sup.sock"))
	agentPath := filepath.Join(dir, "agent.sock")
	script := filepath.Join(t.TempDir(), "late.py")
	if err := os.WriteFile(script, []byte(lateAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	env := jobEnv(t, Options{Socket: filepath.Join(dir, "sup.sock"), AgentSocket: agentPath, Hz: 20})
	cmd := jobCommand(t, env, testbin.Python(), script)
	pipes := testbin.StartPiped(t, cmd)
	stdin, stderr := pipes.Stdin, pipes.Stderr
	pid := cmd.Process.Pid
	lines := bufio.NewScanner(pipes.Stdout)
	expect := func(want string) {
		t.Helper()
		if !lines.Scan() || lines.Text() != want {
			stdin.Close()
			cmd.Wait()
			t.Fatalf("job said %q, want %q\nstderr:\n%s", lines.Text(), want, stderr.String())
		}
	}
	expect("absent True")

	first, err := Listen(agentPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	a1 := record(first)
	io.WriteString(stdin, "go\n")
	expect("connected")
	a1.wait(t, "a sample on the first agent", func(ms []Message) bool { return len(byType(ms, pid, TypeSample)) > 0 })
	first.Close()

	second := listenIn(t, dir, "agent.sock")
	a2 := record(second)
	io.WriteString(stdin, "go\n")
	expect("reconnected")
	io.WriteString(stdin, "go\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("job: %v\nstderr:\n%s", err, stderr.String())
	}
	sm := sup.gone(t, pid)
	am1, am2 := a1.closed(t), a2.gone(t, pid)
	for _, c := range []struct {
		name string
		ms   []Message
	}{{"first agent", am1}, {"restarted agent", am2}} {
		if len(c.ms) == 0 || c.ms[0].Type != TypeHello || c.ms[0].PeerPID != pid || c.ms[0].PID != pid {
			t.Errorf("%s: %d messages, want hello from pid %d first", c.name, len(c.ms), pid)
		}
	}
	checkSameStream(t, pid, sm, am1)
	checkSameStream(t, pid, sm, am2)
	if len(byType(am2, pid, TypeBye)) != 1 {
		t.Errorf("the restarted agent got no bye")
	}
	if n := len(byType(sm, pid, TypeHello)); n != 1 {
		t.Errorf("the supervisor got %d hellos, want 1", n)
	}
}

// wedgedAgent floods the probe's sockets while the agent accepts but never
// reads. Sends must drop on the agent's side instead of blocking (a blocked
// send would hang the job), the supervisor must get every line, and once
// the agent reads again, the next sample it gets counts what it missed.
const wedgedAgent = `import json, sys
from vramguard import _probe

p = _probe._p
for i in range(3000):
    p.send({"type": "note", "i": i, "pad": "x" * 1000})
print(json.dumps({"agent_dropped": p.agent.dropped, "agent_dead": p.agent.dead,
                  "dropped": p.conn.dropped}), flush=True)
sys.stdin.readline()
p.agent.flush(30)
p.send(p.sample())
p.agent.flush(30)
print("sent", flush=True)
sys.stdin.readline()
`

func TestAgentSocketWedged(t *testing.T) {
	t.Parallel()
	dir := sockDir(t)
	supL := listenIn(t, dir, "sup.sock")
	sup := record(supL)
	agentPath := filepath.Join(dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: agentPath, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err == nil {
			accepted <- c
		}
	}()
	script := filepath.Join(t.TempDir(), "wedged.py")
	if err := os.WriteFile(script, []byte(wedgedAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	// 0.01 Hz: after the first, no sample of the sampler's own comes
	// between the flood and the sample the script sends.
	env := jobEnv(t, Options{Socket: supL.Path(), AgentSocket: agentPath, Hz: 0.01})
	cmd := jobCommand(t, env, testbin.Python(), script)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("job said nothing\nstderr:\n%s", stderr.String())
	}
	var got struct {
		AgentDropped int64 `json:"agent_dropped"`
		AgentDead    bool  `json:"agent_dead"`
		Dropped      int64 `json:"dropped"`
	}
	if err := json.Unmarshal(lines.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v\nstderr:\n%s", lines.Text(), err, stderr.String())
	}
	if got.AgentDropped == 0 || got.AgentDead || got.Dropped != 0 {
		t.Fatalf("after 3 MB to an agent that does not read: %+v, want drops on the agent's connection only", got)
	}
	var c *net.UnixConn
	select {
	case c = <-accepted:
	case <-time.After(agentWait):
		t.Fatal("the probe never connected to the agent")
	}
	defer c.Close()
	// Read the agent's side now: the script flushes, then sends a sample.
	io.WriteString(stdin, "go\n")
	var last Message
	rd := bufio.NewScanner(c)
	rd.Buffer(nil, 1<<20)
	for rd.Scan() {
		var m Message
		if err := json.Unmarshal(rd.Bytes(), &m); err != nil {
			t.Fatalf("agent line %q: %v", rd.Text(), err)
		}
		if m.Type == TypeSample && m.Seq > 1 {
			last = m
			break
		}
	}
	if last.Dropped != got.AgentDropped {
		t.Errorf("the agent's next sample says %d dropped, the probe counted %d", last.Dropped, got.AgentDropped)
	}
	if !lines.Scan() || lines.Text() != "sent" {
		t.Fatalf("job: %q\nstderr:\n%s", lines.Text(), stderr.String())
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("job: %v\nstderr:\n%s", err, stderr.String())
	}
	ms := sup.gone(t, cmd.Process.Pid)
	if n := len(byType(ms, 0, "note")); n != 3000 {
		t.Errorf("the supervisor got %d of 3000 lines", n)
	}
	for _, m := range byType(ms, 0, TypeSample) {
		if m.Dropped != 0 {
			t.Errorf("a supervisor sample counts %d dropped; the drops were the agent's", m.Dropped)
		}
	}
}

func TestAgentSocketFor(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"nothing inherited: the agent's socket in the state directory", nil, "/home/u/.vg/probe.sock"},
		{"an inherited probe socket (an agent listening elsewhere)", map[string]string{EnvSocket: "/run/vg/p.sock"}, "/run/vg/p.sock"},
		{"an inherited agent socket wins (a supervisor's child)", map[string]string{EnvSocket: "/tmp/vramguard-0/r1.sock", EnvAgentSocket: "/run/vg/p.sock"}, "/run/vg/p.sock"},
		{"empty values count as unset", map[string]string{EnvSocket: "", EnvAgentSocket: ""}, "/home/u/.vg/probe.sock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := AgentSocketFor(func(k string) string { return tc.env[k] }, "/home/u/.vg"); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEnvAgentSocket(t *testing.T) {
	cases := []struct {
		name  string
		in    []string
		agent string
		want  string // the variable in the result; "-" for absent
	}{
		{"set", []string{"X=1"}, "/run/vg/p.sock", "/run/vg/p.sock"},
		{"replaces an inherited one", []string{EnvAgentSocket + "=/old.sock"}, "/new.sock", "/new.sock"},
		{"unset removes an inherited one", []string{EnvAgentSocket + "=/old.sock", "X=1"}, "", "-"},
		{"unset and not inherited", []string{"X=1"}, "", "-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Env(tc.in, "/probe", Options{Socket: "/s", AgentSocket: tc.agent})
			var vals []string
			for _, kv := range got {
				if k, v, _ := strings.Cut(kv, "="); k == EnvAgentSocket {
					vals = append(vals, v)
				}
			}
			switch {
			case tc.want == "-" && len(vals) != 0:
				t.Errorf("%s = %q, want it absent", EnvAgentSocket, vals)
			case tc.want != "-" && !slices.Equal(vals, []string{tc.want}):
				t.Errorf("%s = %q, want once %q", EnvAgentSocket, vals, tc.want)
			}
			if !slices.Contains(got, EnvSocket+"=/s") {
				t.Errorf("%s lost: %q", EnvSocket, got)
			}
		})
	}
}

// underRunJob is a short torch job that reports its pid and the probe
// sockets it was given.
const underRunJob = `import json, os, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
print(json.dumps({"job": os.getpid(), "probe": os.environ.get("VRAMGUARD_PROBE_SOCKET"),
                  "agent": os.environ.get("VRAMGUARD_AGENT_SOCKET")}), flush=True)
`

// Through the binary: `vramguard run` points the job's probe at its own
// socket and, as the agent socket, at the one the job would have used
// without it. The post-mortem and the agent both hear the job's process.
func TestAgentSocketUnderRun(t *testing.T) {
	t.Parallel()
	bin := testbin.Path(t)
	cases := []struct {
		name string
		// env is vramguard's extra environment, given the state directory
		// and a socket directory; agent is where the agent listens.
		env   func(home, dir string) []string
		agent func(home, dir string) string
	}{
		{"the agent's socket in the state directory", func(home, dir string) []string { return nil },
			func(home, dir string) string { return DefaultSocket(home) }},
		{"an inherited probe socket", func(home, dir string) []string { return []string{EnvSocket + "=" + filepath.Join(dir, "a.sock")} },
			func(home, dir string) string { return filepath.Join(dir, "a.sock") }},
		{"an inherited agent socket wins", func(home, dir string) []string {
			return []string{EnvSocket + "=" + filepath.Join(dir, "other.sock"), EnvAgentSocket + "=" + filepath.Join(dir, "a.sock")}
		}, func(home, dir string) string { return filepath.Join(dir, "a.sock") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home, dir := sockDir(t), sockDir(t)
			agentPath := tc.agent(home, dir)
			agentL, err := Listen(agentPath)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { agentL.Close() })
			agent := record(agentL)
			env := append([]string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir(), "LANG=C.UTF-8", "OMP_NUM_THREADS=1", "VRAMGUARD_HOME=" + home},
				tc.env(home, dir)...)
			r := runJob(t, jobCommand(t, env, bin, "run", "--json", "--", testbin.Python(), "-c", underRunJob))
			var pm struct {
				RunID string `json:"run_id"`
				Probe *struct {
					PIDs []int `json:"pids"`
				} `json:"probe"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &pm); err != nil || r.Code != 0 {
				t.Fatalf("vramguard run --json: exit %d, %v\nstdout:\n%s\nstderr:\n%s", r.Code, err, r.Stdout, r.Stderr)
			}
			// Under --json the job's stdout goes to vramguard's stderr.
			var job struct {
				PID   int    `json:"job"`
				Probe string `json:"probe"`
				Agent string `json:"agent"`
			}
			for _, line := range strings.Split(r.Stderr, "\n") {
				if i := strings.Index(line, `{"job"`); i >= 0 {
					json.Unmarshal([]byte(line[i:]), &job)
				}
			}
			if job.PID == 0 {
				t.Fatalf("no job report in\n%s", r.Stderr)
			}
			if job.Agent != agentPath || job.Probe == agentPath || !strings.HasPrefix(filepath.Base(job.Probe), "s-") || strings.Contains(job.Probe, pm.RunID) {
				t.Errorf("the job was given %s=%q and %s=%q; want its supervisor's socket and %q", EnvSocket, job.Probe, EnvAgentSocket, job.Agent, agentPath)
			}
			if pm.Probe == nil || !slices.Equal(pm.Probe.PIDs, []int{job.PID}) {
				t.Errorf("post-mortem probe %+v, want the job's pid %d", pm.Probe, job.PID)
			}
			ms := agent.gone(t, job.PID)
			if len(byType(ms, job.PID, TypeSample)) == 0 || len(byType(ms, job.PID, TypeBye)) != 1 {
				t.Errorf("the agent did not hear the job's samples and goodbye")
			}
			for _, m := range ms {
				if m.PeerPID != job.PID || (m.PID != 0 && m.PID != job.PID) {
					t.Errorf("agent message %q about pid %d from peer %d; only the job (%d) should report", m.Type, m.PID, m.PeerPID, job.PID)
				}
			}
			if last := byType(ms, job.PID, TypeSample); len(last) > 0 && last[len(last)-1].OptimizerSteps != 3 {
				t.Errorf("the agent's last sample counts %d optimizer steps, want 3", last[len(last)-1].OptimizerSteps)
			}
		})
	}
}
