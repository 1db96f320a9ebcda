package probe

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// python is Debian's interpreter with python3-torch; `python3` on PATH may
// be another one.
var python = testbin.Python()

var (
	installOnce sync.Once
	installDir  string
	installErr  error
)

// probeDir installs the embedded probe once for the whole test binary.
func probeDir(t *testing.T) string {
	t.Helper()
	installOnce.Do(func() {
		var d string
		d, installErr = os.MkdirTemp("", "vgprobe-")
		if installErr == nil {
			installDir, installErr = Install(d)
		}
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installDir
}

func testdata(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// baseEnv is a small, fixed environment so runs with and without the probe
// differ only in what the probe adds.
func baseEnv(extra ...string) []string {
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir(), "LANG=C.UTF-8", "OMP_NUM_THREADS=1", "PYTHONHASHSEED=0"}
	return append(env, extra...)
}

type result struct {
	stdout, stderr []byte
	code           int
	pid            int
}

// lastJSON decodes the last line of stdout.
func (r result) lastJSON(t *testing.T, v any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(r.stdout)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("last stdout line is not JSON: %v\nstdout:\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
	}
}

func runPython(t *testing.T, env []string, stdin []byte, args ...string) result {
	t.Helper()
	cmd := pythonCmd(t, env, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	r := testbin.Run(t, cmd)
	return result{stdout: []byte(r.Stdout), stderr: []byte(r.Stderr), code: r.Code, pid: r.PID}
}

// trainReport is the last line testdata/scripts/train_cpu.py prints: its
// process, its optimizer steps, its DataLoader workers, whether CUDA was
// initialised (in the job, in a worker) and the sizes of what it saved.
type trainReport struct {
	PID             int   `json:"pid"`
	Steps           int64 `json:"steps"`
	WorkerPIDs      []int `json:"worker_pids"`
	WorkerCUDA      bool  `json:"worker_cuda_initialized"`
	CUDAInitialized bool  `json:"cuda_initialized"`
	HalfBytes       int64 `json:"half_bytes"`
	FinalBytes      int64 `json:"final_bytes"`
	BufferBytes     int64 `json:"buffer_bytes"`
}

// listen starts a Listener on a socket in a fresh directory.
func listen(t *testing.T) *Listener {
	t.Helper()
	return listenIn(t, sockDir(t), "probe.sock")
}

// collect reads messages until every pid in pids has disconnected, and
// returns everything read. It fails the test if that takes over 20 s after
// the processes have exited (they have when it is called).
func collect(t *testing.T, l *Listener, pids ...int) []Message {
	t.Helper()
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	var msgs []Message
	deadline := time.After(20 * time.Second)
	for len(want) > 0 {
		select {
		case m, ok := <-l.Messages():
			if !ok {
				t.Fatalf("listener closed; still waiting for pids %v", want)
			}
			msgs = append(msgs, m)
			if m.Type == TypeDisconnect {
				delete(want, m.PID)
			}
		case <-deadline:
			t.Fatalf("timed out waiting for pids %v to disconnect; got %d messages", want, len(msgs))
		}
	}
	return msgs
}

func byType(msgs []Message, pid int, typ string) []Message {
	var out []Message
	for _, m := range msgs {
		if m.Type == typ && (pid == 0 || m.PID == pid) {
			out = append(out, m)
		}
	}
	return out
}

func dumpMessages(t *testing.T, msgs []Message) {
	t.Helper()
	for _, m := range msgs {
		b, _ := json.Marshal(m)
		t.Logf("%s", b)
	}
}

// pythonCmd is python with args, bounded, with env as its whole environment,
// in a fresh directory.
func pythonCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := testbin.Command(t, env, python, args...)
	cmd.Dir = t.TempDir()
	return cmd
}

func TestMain(m *testing.M) {
	testbin.Require(testbin.Torch, testbin.NumPy, testbin.IPython, testbin.IPyKernel)
	code := m.Run()
	// The probe install is shared by all tests; remove it once every test
	// is done.
	if installDir != "" {
		os.RemoveAll(filepath.Dir(installDir))
	}
	os.Exit(code)
}
