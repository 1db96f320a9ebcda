package jupyter_test

// The integration test runs Debian's jupyter-server (packages jupyter-server
// and python3-ipykernel) with vramguard's kernelspec, executes cells over the
// kernel protocol and drives a kernel into a real OOM kill under a cgroup
// memory limit (root, or a delegated cgroup, is needed for that).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/testbin"
)

// python is the interpreter with ipykernel: Debian's, which has torch too.
var python = testbin.Python()

func TestMain(m *testing.M) {
	testbin.Require(testbin.Torch, testbin.IPyKernel, testbin.JupyterServer)
	testbin.Main(m)
}

// lab is one isolated Jupyter installation: its own data, runtime and
// config directories, notebook root and vramguard state.
type lab struct {
	t                                 *testing.T
	bin                               string
	data, runtime, config, root, home string
	ipython                           string
	server                            *exec.Cmd
	serverLog                         *bytes.Buffer
	client                            *jupyter.Client
	token                             string
}

func newLab(t *testing.T) *lab {
	t.Helper()
	for _, p := range []string{"jupyter-server", python} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s not found: install the Debian packages jupyter-server and python3-ipykernel", p)
		}
	}
	if err := exec.Command(python, "-c", "import ipykernel_launcher").Run(); err != nil {
		t.Fatalf("%s cannot import ipykernel: install python3-ipykernel", python)
	}
	d := t.TempDir()
	l := &lab{t: t, bin: testbin.Path(t), data: filepath.Join(d, "data"), config: filepath.Join(d, "config"),
		root: filepath.Join(d, "notebooks"), home: filepath.Join(d, "state"), ipython: filepath.Join(d, "ipython")}
	l.runtime = filepath.Join(l.data, "runtime")
	for _, p := range []string{l.data, l.config, l.root, l.home, l.ipython, filepath.Join(l.root, "sub")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *lab) env() []string {
	return testbin.JupyterLab{Data: l.data, Config: l.config, IPython: l.ipython, Home: l.home}.Environ()
}

// vg runs vramguard with the lab's environment.
func (l *lab) vg(args ...string) testbin.Result {
	l.t.Helper()
	return testbin.Run(l.t, testbin.Command(l.t, l.env(), l.bin, args...))
}

// startServer starts jupyter-server with token auth on a free loopback port
// and waits until its API answers.
func (l *lab) startServer() {
	t := l.t
	t.Helper()
	var b [16]byte
	rand.Read(b[:])
	l.token = hex.EncodeToString(b[:])
	port := testbin.FreePort(t)
	cmd := exec.Command("jupyter-server", "--no-browser", "--allow-root",
		"--ServerApp.ip=127.0.0.1", "--ServerApp.port="+strconv.Itoa(port), "--ServerApp.port_retries=0",
		"--ServerApp.token="+l.token, "--ServerApp.root_dir="+l.root,
		// Jupyter's own shutdown_wait_time (5 s): a restart's SIGTERM after
		// 2.5 s, which a loaded test machine's idle kernel may need, is
		// part of the restart.
		"--KernelRestarter.time_to_dead=0.5", "--MappingKernelManager.cull_idle_timeout=0")
	cmd.Env = l.env()
	cmd.Dir = l.root
	l.serverLog = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = l.serverLog, l.serverLog
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.server = cmd
	t.Cleanup(func() {
		l.stopServer()
		l.killStrayKernels()
		if t.Failed() {
			t.Logf("jupyter-server log:\n%s", l.serverLog.String())
		}
	})
	file := filepath.Join(l.runtime, fmt.Sprintf("jpserver-%d.json", cmd.Process.Pid))
	testbin.WaitFor(t, 30*time.Second, "the server's runtime file and API", func() bool {
		s, err := jupyter.ParseServerFile(file)
		if err != nil {
			return false
		}
		// a session starts its kernel before it answers: seconds on a loaded machine
		l.client = jupyter.NewClient(s, 30*time.Second)
		return l.client.Do(context.Background(), http.MethodGet, "api/status", nil, nil) == nil
	})
}

func (l *lab) stopServer() {
	if l.server == nil || l.server.ProcessState != nil {
		return
	}
	l.server.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { l.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-l.server.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// killStrayKernels kills what is left of the lab's kernels (supervisors
// included) after a failed test, found by their connection files.
func (l *lab) killStrayKernels() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(l.runtime+"/kernel-")) {
			l.t.Logf("killing stray kernel process %d", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// kernelConn speaks the Jupyter messaging protocol over the server's
// /api/kernels/<id>/channels WebSocket.
type kernelConn struct {
	t       *testing.T
	c       *websocket.Conn
	session string
	// in carries every message the kernel's channels send, read by one
	// goroutine (a websocket read that times out closes the connection);
	// closed when the connection is
	in   chan []byte
	rerr error // why in was closed
}

// next returns the next message, or false when d passed first; a closed
// connection fails the test.
func (k *kernelConn) next(d time.Duration) (message, bool) {
	k.t.Helper()
	select {
	case b, ok := <-k.in:
		if !ok {
			k.t.Fatalf("kernel channels closed: %v", k.rerr)
		}
		var m message
		if json.Unmarshal(b, &m) != nil {
			return message{}, true
		}
		if m.MsgType == "" && m.Header != nil {
			m.MsgType, _ = m.Header["msg_type"].(string)
		}
		return m, true
	case <-time.After(d):
		return message{}, false
	}
}

func (l *lab) connect(kernelID string) *kernelConn {
	t := l.t
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	session := hex.EncodeToString(b[:])
	u := strings.Replace(l.client.Endpoint("api/kernels/"+kernelID+"/channels"), "http://", "ws://", 1) + "?session_id=" + session
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"token " + l.token}}})
	if err != nil {
		t.Fatalf("connect to kernel %s: %v", kernelID, err)
	}
	c.SetReadLimit(64 << 20)
	kc := &kernelConn{t: t, c: c, session: session, in: make(chan []byte, 1024)}
	go func() {
		defer close(kc.in)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				kc.rerr = err
				return
			}
			kc.in <- b
		}
	}()
	t.Cleanup(func() { c.Close(websocket.StatusNormalClosure, "") })
	kc.ready(30 * time.Second)
	return kc
}

// ready waits until the kernel answers on shell and its iopub messages reach
// this connection, as Jupyter's own clients do before the first cell: a
// kernel just (re)started binds its sockets after its process appears, and
// an iopub subscription made early can miss a cell's output and its idle
// status. It sends kernel_info_request until an iopub message answers one.
func (k *kernelConn) ready(d time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		id := k.request("kernel_info_request", map[string]any{})
		for {
			m, ok := k.next(time.Second)
			if !ok {
				break // no answer within a second: ask again
			}
			if pid, _ := m.ParentHeader["msg_id"].(string); pid == id && m.Channel == "iopub" {
				return
			}
		}
	}
	k.t.Fatalf("the kernel's iopub messages did not reach the test within %s", d)
}

type message struct {
	Channel      string         `json:"channel"`
	Header       map[string]any `json:"header"`
	ParentHeader map[string]any `json:"parent_header"`
	MsgType      string         `json:"msg_type"`
	Content      map[string]any `json:"content"`
}

// execution is what one execute_request produced.
type execution struct {
	status string // execute_reply status: ok, error, aborted
	ename  string
	stdout string
	stderr string
	// restarting is set when the kernel died during the cell.
	restarting bool
}

func (k *kernelConn) send(code string) string {
	k.t.Helper()
	return k.request("execute_request", map[string]any{"code": code, "silent": false, "store_history": true,
		"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true})
}

// request sends a shell request of msgType and returns its msg_id.
func (k *kernelConn) request(msgType string, content map[string]any) string {
	k.t.Helper()
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	msg := map[string]any{
		"header": map[string]any{"msg_id": id, "username": "test", "session": k.session, "msg_type": msgType,
			"version": "5.3", "date": time.Now().UTC().Format(time.RFC3339Nano)},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "buffers": []any{}, "channel": "shell",
		"content": content,
	}
	b2, _ := json.Marshal(msg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.c.Write(ctx, websocket.MessageText, b2); err != nil {
		k.t.Fatalf("send %s: %v", msgType, err)
	}
	return id
}

// wait reads messages until the cell id is done (its execute_reply and its
// idle status both seen) or the kernel restarts.
func (k *kernelConn) wait(id string, d time.Duration) execution {
	k.t.Helper()
	deadline := time.Now().Add(d)
	var ex execution
	replied, idle := false, false
	for !(replied && idle) {
		m, ok := k.next(time.Until(deadline))
		if !ok {
			k.t.Fatalf("waiting for cell %s: no reply and idle status within %s (so far: %+v, replied %v, idle %v)", id, d, ex, replied, idle)
		}
		if m.MsgType == "status" {
			if st, _ := m.Content["execution_state"].(string); st == "restarting" || st == "dead" {
				ex.restarting = true
				return ex
			}
		}
		if pid, _ := m.ParentHeader["msg_id"].(string); pid != id {
			continue
		}
		switch m.MsgType {
		case "stream":
			text, _ := m.Content["text"].(string)
			if m.Content["name"] == "stderr" {
				ex.stderr += text
			} else {
				ex.stdout += text
			}
		case "error":
			ex.ename, _ = m.Content["ename"].(string)
		case "execute_reply":
			ex.status, _ = m.Content["status"].(string)
			replied = true
		case "status":
			if m.Content["execution_state"] == "idle" {
				idle = true
			}
		}
	}
	return ex
}

func (k *kernelConn) run(code string) execution {
	k.t.Helper()
	ex := k.wait(k.send(code), 60*time.Second)
	if ex.restarting {
		k.t.Fatalf("the kernel died running %q", code)
	}
	if ex.status != "ok" {
		k.t.Fatalf("cell %q: status %q %s\nstderr: %s", code, ex.status, ex.ename, ex.stderr)
	}
	return ex
}

// kernelEntry is the part of `vramguard kernels --json` the test checks.
type kernelEntry struct {
	Notebook       string   `json:"notebook"`
	KernelID       string   `json:"kernel_id"`
	PID            int      `json:"pid"`
	PIDs           []int    `json:"pids"`
	GPUBytes       *uint64  `json:"gpu_bytes"`
	RSSBytes       *uint64  `json:"rss_bytes"`
	ExecutionState string   `json:"execution_state"`
	IdleS          *float64 `json:"idle_s"`
	Idle           bool     `json:"idle"`
	Supervised     bool     `json:"supervised"`
	RunID          string   `json:"run_id"`
}

func (l *lab) kernels() map[string]kernelEntry {
	l.t.Helper()
	r := l.vg("kernels", "--json", "--gpu-backend", "none", "--runtime-dir", l.runtime)
	var es []kernelEntry
	r.JSON(l.t, &es)
	out := map[string]kernelEntry{}
	for _, e := range es {
		if e.GPUBytes == nil || e.RSSBytes == nil || e.IdleS == nil {
			l.t.Fatalf("kernels --json: an entry lacks gpu_bytes, rss_bytes or idle_s: %s", r.Stdout)
		}
		out[e.KernelID] = e
	}
	return out
}

func (l *lab) explain(run string) map[string]any {
	l.t.Helper()
	var m map[string]any
	l.vg("explain", "--json", run).JSON(l.t, &m)
	return m
}

func attemptReasons(m map[string]any) []string {
	var out []string
	l, _ := m["attempts_detail"].([]any)
	for _, a := range l {
		am, _ := a.(map[string]any)
		r, _ := am["reason"].(string)
		out = append(out, r)
	}
	return out
}

// selfReport is what a kernel says of itself: its pid and resident memory.
const selfReport = `import os; print(os.getpid(), int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE'))`

func parseSelf(t *testing.T, out string) (int, uint64) {
	t.Helper()
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("unexpected self report %q", out)
	}
	pid, _ := strconv.Atoi(f[0])
	rss, _ := strconv.ParseUint(f[1], 10, 64)
	return pid, rss
}

func within(got, want uint64, frac float64) bool {
	d := float64(got) - float64(want)
	if d < 0 {
		d = -d
	}
	return d <= frac*float64(want)
}

// TestJupyterKernels is the acceptance test of the Jupyter integration.
func TestJupyterKernels(t *testing.T) {
	l := newLab(t)
	const limit = "256m"

	// The kernelspec, as Jupyter itself sees it.
	if r := l.vg("jupyter", "install", "--user", "--python", python, "--memory-limit", limit, "--", "--sample-interval", "100ms"); r.Code != 0 {
		t.Fatalf("jupyter install: exit %d: %s", r.Code, r.Stderr)
	}
	specs := l.kernelspecs()
	if !strings.Contains(specs, `"vramguard"`) {
		t.Fatalf("Jupyter does not list the vramguard kernelspec: %s", specs)
	}

	l.startServer()
	ctx := context.Background()
	sa, err := l.client.CreateSession(ctx, "a.ipynb", "vramguard")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := l.client.CreateSession(ctx, "sub/b.ipynb", "vramguard")
	if err != nil {
		t.Fatal(err)
	}
	ka, kb := l.connect(sa.Kernel.ID), l.connect(sb.Kernel.ID)

	// Host memory in both notebooks: A holds ~120 MiB, B ~40 MiB.
	ka.run("big = b'a' * (120 << 20)")
	kb.run("small = b'b' * (40 << 20)")
	pidA, rssA := parseSelf(t, ka.run(selfReport).stdout)
	pidB, rssB := parseSelf(t, kb.run(selfReport).stdout)

	ks := l.kernels()
	for _, c := range []struct {
		name string
		s    jupyter.Session
		pid  int
		rss  uint64
		min  uint64
	}{
		{"a.ipynb", sa, pidA, rssA, 120 << 20},
		{"sub/b.ipynb", sb, pidB, rssB, 40 << 20},
	} {
		e, ok := ks[c.s.Kernel.ID]
		if !ok {
			t.Fatalf("kernels --json lacks the kernel of %s", c.name)
		}
		if want := filepath.Join(l.root, c.name); e.Notebook != want {
			t.Errorf("%s: notebook %q, want %q", c.name, e.Notebook, want)
		}
		if e.PID != c.pid {
			t.Errorf("%s: pid %d, the kernel says it is %d", c.name, e.PID, c.pid)
		}
		if *e.RSSBytes < c.min || !within(*e.RSSBytes, c.rss, 0.25) {
			t.Errorf("%s: rss_bytes %d, the kernel says %d (at least %d)", c.name, *e.RSSBytes, c.rss, c.min)
		}
		if *e.GPUBytes != 0 {
			t.Errorf("%s: gpu_bytes %d without a GPU backend", c.name, *e.GPUBytes)
		}
		if e.ExecutionState != "idle" || *e.IdleS < 0 {
			t.Errorf("%s: state %q idle_s %v", c.name, e.ExecutionState, *e.IdleS)
		}
		if !e.Supervised || e.RunID == "" {
			t.Errorf("%s: not shown as supervised by a run: %+v", c.name, e)
		}
	}
	runA := ks[sa.Kernel.ID].RunID
	t.Logf("a.ipynb: kernel pid %d rss %d (vramguard: %d); b.ipynb: pid %d rss %d (vramguard: %d)",
		pidA, rssA, *ks[sa.Kernel.ID].RSSBytes, pidB, rssB, *ks[sb.Kernel.ID].RSSBytes)

	// A real OOM kill in A under the kernelspec's memory limit.
	ex := ka.wait(ka.send("boom = b'c' * (400 << 20)"), 60*time.Second)
	if !ex.restarting {
		t.Fatalf("the kernel survived allocating past its %s limit: %+v", limit, ex)
	}
	var last kernelEntry
	testbin.WaitFor(t, 45*time.Second, "Jupyter to restart the killed kernel", func() bool {
		last = l.kernels()[sa.Kernel.ID]
		return last.PID != 0 && last.PID != pidA
	}, func() { t.Logf("last seen: %+v", last) })
	m := l.explain(runA)
	t.Logf("run %s attempts: %v", runA, attemptReasons(m))
	if reasons := attemptReasons(m); len(reasons) < 2 || reasons[0] != "host_oom_killed" {
		t.Fatalf("run %s: attempt reasons %v, want host_oom_killed then the restarted kernel", runA, reasons)
	}
	if e := l.kernels()[sa.Kernel.ID]; e.RunID != runA {
		t.Errorf("the restarted kernel is run %q, want the same run %q", e.RunID, runA)
	}
	if testbin.Alive(pidA) {
		t.Errorf("the killed kernel %d is still alive", pidA)
	}

	// The next kernel of that notebook says why, once, in the notebook.
	ka2 := l.connect(sa.Kernel.ID)
	first := ka2.run("1 + 1")
	t.Logf("first cell after the OOM kill, stderr: %q", first.stderr)
	if !strings.Contains(first.stderr, "host_oom_killed") || !strings.Contains(first.stderr, "vramguard --home "+l.home+" explain "+runA) {
		t.Errorf("the restarted kernel's first cell did not show the notice; stderr %q", first.stderr)
	}
	if again := ka2.run("2 + 2"); strings.Contains(again.stderr, "vramguard") {
		t.Errorf("the notice was shown twice: %q", again.stderr)
	}
	if ka2.run("import os; print(os.environ.get('VRAMGUARD_PREVIOUS_DEATH'))").stdout != "None\n" {
		t.Errorf("the notice's variable leaks into the notebook's environment")
	}

	// Selection lists and does nothing without --yes.
	r := l.vg("kernels", "shutdown", "--idle-longer-than", "0s", "--runtime-dir", l.runtime, "--gpu-backend", "none")
	if r.Code != 0 || !strings.Contains(r.Stdout, "would shutdown") || !strings.Contains(r.Stdout, "b.ipynb") {
		t.Fatalf("shutdown --idle-longer-than 0s: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := l.vg("kernels", "shutdown", "--holding-gpu", "--yes", "--runtime-dir", l.runtime, "--gpu-backend", "none"); r.Code != 0 || !strings.Contains(r.Stderr, "no kernel matches") {
		t.Fatalf("shutdown --holding-gpu without GPU memory: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if ks := l.kernels(); ks[sa.Kernel.ID].PID == 0 || ks[sb.Kernel.ID].PID == 0 {
		t.Fatalf("a listing-only selection shut kernels down")
	}

	// Interrupt a running cell in A.
	id := ka2.send("import time; time.sleep(120)")
	testbin.WaitFor(t, 40*time.Second, "A to be busy", func() bool { return l.kernels()[sa.Kernel.ID].ExecutionState == "busy" })
	if r := l.vg("kernels", "interrupt", "a.ipynb", "--runtime-dir", l.runtime, "--gpu-backend", "none"); r.Code != 0 {
		t.Fatalf("kernels interrupt: exit %d: %s", r.Code, r.Stderr)
	}
	if ex := ka2.wait(id, 40*time.Second); ex.ename != "KeyboardInterrupt" {
		t.Fatalf("interrupted cell: %+v, want KeyboardInterrupt", ex)
	}

	// Restart A on purpose: the same run goes on, and no notice follows a
	// restart that was asked for.
	pidA2 := l.kernels()[sa.Kernel.ID].PID
	if r := l.vg("kernels", "restart", sa.Kernel.ID[:8], "--runtime-dir", l.runtime, "--gpu-backend", "none"); r.Code != 0 {
		t.Fatalf("kernels restart: exit %d: %s", r.Code, r.Stderr)
	}
	testbin.WaitFor(t, 45*time.Second, "A's restarted kernel", func() bool {
		last = l.kernels()[sa.Kernel.ID]
		return last.PID != 0 && last.PID != pidA2
	}, func() { t.Logf("last seen: %+v", last) })
	if reasons := attemptReasons(l.explain(runA)); len(reasons) != 3 || reasons[1] != "restarted" {
		logs := l.vg("logs", runA, "--attempt", "2")
		t.Errorf("run %s after a restart: attempts %v, want [host_oom_killed restarted (running)]; the second attempt's log ends:\n%s%s", runA, reasons, tail(logs.Stdout, 3000), logs.Stderr)
	}
	ka3 := l.connect(sa.Kernel.ID)
	if ex := ka3.run("3 + 3"); strings.Contains(ex.stderr, "vramguard") {
		t.Errorf("a notice after a restart that was asked for: %q", ex.stderr)
	}

	// Shut the idle kernel B down by its notebook.
	r = l.vg("kernels", "shutdown", "b.ipynb", "--runtime-dir", l.runtime, "--gpu-backend", "none")
	if r.Code != 0 {
		t.Fatalf("kernels shutdown b.ipynb: exit %d: %s", r.Code, r.Stderr)
	}
	kernels, err := l.client.Kernels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kernels {
		if k.ID == sb.Kernel.ID {
			t.Fatalf("kernel of b.ipynb still listed by the server after shutdown")
		}
	}
	testbin.WaitFor(t, 15*time.Second, "B's kernel process to exit", func() bool { return !testbin.Alive(pidB) })
	runB := ks[sb.Kernel.ID].RunID
	testbin.WaitFor(t, 15*time.Second, "B's run to finish", func() bool { return l.explain(runB)["status"] == "finished" })
	if reasons := attemptReasons(l.explain(runB)); len(reasons) != 1 || reasons[0] != "success" {
		t.Errorf("B's run after shutdown: attempts %v, want one that ended with success", reasons)
	}
	if e, ok := l.kernels()[sb.Kernel.ID]; ok {
		t.Errorf("kernels still lists B after its shutdown: %+v", e)
	}

	// Uninstalled, nothing of vramguard is left where Jupyter looks.
	l.stopServer()
	if left := l.leftovers(); len(left) == 0 {
		t.Fatalf("the leftover check finds nothing even before uninstall")
	}
	if r := l.vg("jupyter", "uninstall", "--user"); r.Code != 0 {
		t.Fatalf("jupyter uninstall: exit %d: %s", r.Code, r.Stderr)
	}
	if specs := l.kernelspecs(); strings.Contains(specs, "vramguard") {
		t.Errorf("Jupyter still lists a vramguard kernelspec: %s", specs)
	}
	if left := l.leftovers(); len(left) != 0 {
		t.Errorf("left behind in Jupyter's paths: %q", left)
	}
}

// leftovers lists what mentions vramguard, by name or content, under the
// lab's Jupyter directories (data, runtime, config and its search path);
// Jupyter's own kernelspec list covers the system directories.
func (l *lab) leftovers() []string {
	var out []string
	for _, dir := range append(l.jupyterPaths(), l.data, l.config) {
		if !strings.HasPrefix(dir, filepath.Dir(l.data)+string(filepath.Separator)) {
			continue
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if strings.Contains(strings.ToLower(d.Name()), "vramguard") {
				out = append(out, p)
			} else if d.Type().IsRegular() {
				if b, err := os.ReadFile(p); err == nil && bytes.Contains(bytes.ToLower(b), []byte("vramguard")) {
					out = append(out, p)
				}
			}
			return nil
		})
	}
	return out
}

// kernelspecs is Jupyter's own list of kernelspecs (JSON).
func (l *lab) kernelspecs() string {
	l.t.Helper()
	cmd := exec.Command(python, "-c", "import json; from jupyter_client.kernelspec import KernelSpecManager as M; print(json.dumps(M().find_kernel_specs()))")
	cmd.Env = l.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		l.t.Fatalf("list kernelspecs: %v\n%s", err, out)
	}
	return string(out)
}

// jupyterPaths are the data directories Jupyter searches.
func (l *lab) jupyterPaths() []string {
	l.t.Helper()
	cmd := exec.Command(python, "-c", "import json; from jupyter_core.paths import jupyter_path; print(json.dumps(jupyter_path()))")
	cmd.Env = l.env()
	out, err := cmd.Output()
	if err != nil {
		l.t.Fatalf("jupyter_path: %v", err)
	}
	var ps []string
	if err := json.Unmarshal(out, &ps); err != nil {
		l.t.Fatalf("jupyter_path: %v: %s", err, out)
	}
	return ps
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
