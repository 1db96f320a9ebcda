package probe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// End to end through the vramguard binary: `vramguard run` injects the
// probe, and `vramguard explain --json` shows what it saw.

// vramguardCmd is the binary with the small fixed environment of baseEnv
// and home as its state directory, run in a fresh directory.
func vramguardCmd(t *testing.T, home string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := testbin.Vramguard(t, baseEnv("VRAMGUARD_HOME="+home), args...)
	cmd.Dir = t.TempDir()
	return cmd
}

type explainDoc struct {
	RunID string `json:"run_id"`
	Probe *struct {
		Samples            int    `json:"samples"`
		OptimizerSteps     int64  `json:"optimizer_steps"`
		PeakAllocatedBytes *int64 `json:"peak_allocated_bytes"`
		PeakReservedBytes  *int64 `json:"peak_reserved_bytes"`
		PeakRSSBytes       int64  `json:"peak_rss_bytes"`
		PIDs               []int  `json:"pids"`
		Checkpoints        []struct {
			Path    string  `json:"path"`
			Bytes   int64   `json:"bytes"`
			Seconds float64 `json:"seconds"`
			Atomic  bool    `json:"atomic"`
		} `json:"checkpoints"`
	} `json:"probe"`
}

func explain(t *testing.T, home, run string) (explainDoc, []byte) {
	t.Helper()
	r := testbin.Run(t, vramguardCmd(t, home, "explain", "--json", run))
	var doc explainDoc
	r.JSON(t, &doc)
	return doc, []byte(r.Stdout)
}

// Acceptance 1: a real CPU training loop under `vramguard run`: optimizer
// steps, host memory and checkpoints appear in `explain --json`.
func TestE2ERunExplainProbe(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	out := t.TempDir()
	r := testbin.Run(t, vramguardCmd(t, home, "run", "--json", "--", python, testdata(t, "scripts/train_cpu.py"), out))
	var pm struct {
		RunID string `json:"run_id"`
	}
	if r.JSON(t, &pm); pm.RunID == "" {
		t.Fatalf("run --json has no run_id:\n%s", r.Stdout)
	}
	// The job's stdout goes to vramguard's stderr under --json; its last
	// line is the job's report.
	var rep trainReport
	for _, line := range strings.Split(r.Stderr, "\n") {
		if i := strings.Index(line, `{"pid"`); i >= 0 {
			json.Unmarshal([]byte(line[i:]), &rep)
		}
	}
	doc, raw := explain(t, home, pm.RunID)
	p := doc.Probe
	if p == nil {
		t.Fatalf("explain --json has no probe object:\n%s", raw)
	}
	if p.OptimizerSteps != 24 || rep.Steps != 24 {
		t.Errorf("optimizer_steps %d, job made %d", p.OptimizerSteps, rep.Steps)
	}
	if p.Samples < 2 || p.PeakRSSBytes < 50<<20 {
		t.Errorf("samples %d, peak_rss_bytes %d", p.Samples, p.PeakRSSBytes)
	}
	if p.PeakAllocatedBytes != nil || p.PeakReservedBytes != nil {
		t.Errorf("CPU job has CUDA peaks: %v %v", p.PeakAllocatedBytes, p.PeakReservedBytes)
	}
	if len(p.PIDs) != 3 {
		t.Errorf("pids %v, want the job and its 2 DataLoader workers (%d, %v)", p.PIDs, rep.PID, rep.WorkerPIDs)
	}
	if len(p.Checkpoints) != 3 || p.Checkpoints[1].Path != filepath.Join(out, "final.pt") || p.Checkpoints[1].Bytes != rep.FinalBytes {
		t.Errorf("checkpoints %+v (final.pt is %d bytes)\n%s", p.Checkpoints, rep.FinalBytes, raw)
	}
}

// Acceptance 6 through the binary: with --atomic-save, SIGKILL of the job in
// the middle of a large torch.save leaves the previous checkpoint loadable.
func TestE2EAtomicSaveSIGKILL(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "model.pt")
	cmd := vramguardCmd(t, home, "run", "--atomic-save", "--", python, testdata(t, "scripts/save_kill.py"), ckpt)
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	pid := 0
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 2 && f[0] == "pid" {
			pid, _ = strconv.Atoi(f[1])
		}
		if strings.HasSuffix(line, "saving second") {
			break
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("job never reached the second save\n%s", stderr.String())
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go func() { // drain
		for sc.Scan() {
		}
	}()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(syscall.SIGKILL) {
		t.Fatalf("vramguard run: %v (want the job's SIGKILL mirrored as 137)\n%s", err, stderr.String())
	}
	r := runPython(t, baseEnv(), nil, testdata(t, "scripts/load_ckpt.py"), ckpt)
	var got loaded
	r.lastJSON(t, &got)
	if !got.OK || got.Marker != "first" || got.N != 8<<20 {
		t.Fatalf("previous checkpoint not loadable after SIGKILL mid-save under --atomic-save: %+v", got)
	}
}
