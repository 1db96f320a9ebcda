package jupyter_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestRenamedSupervisor installs the kernelspec from a copy of vramguard
// named otherwise (as a package or a user may name it) and drives a real
// notebook kernel under it, killed once and restarted by Jupyter:
//
//   - `kernels` tells the kernel from its supervisor by the executable, not
//     the name: the kernel's own PID, supervised, with its run;
//   - the run is named after the notebook;
//   - `runs` shows the death of the first attempt once the kernel is back,
//     and after it ends (success after killed), within 80 columns;
//   - kernel actions complete to the kernel id and the notebook.
func TestRenamedSupervisor(t *testing.T) {
	l := newLab(t)
	// the binary under another name, as a site may install it
	dir := t.TempDir()
	renamed := filepath.Join(dir, "gpu-guard")
	if err := os.Rename(testbin.CopyBinary(t, l.bin, dir), renamed); err != nil {
		t.Fatal(err)
	}
	if r := testbin.Run(t, testbin.Command(t, l.env(), renamed, "jupyter", "install", "--user", "--python", python,
		"--", "--sample-interval", "200ms", "--gpu-backend", "none")); r.Code != 0 {
		t.Fatalf("jupyter install: exit %d: %s", r.Code, r.Stderr)
	}
	l.startServer()
	ctx := context.Background()
	s, err := l.client.CreateSession(ctx, "sub/renamed.ipynb", "vramguard")
	if err != nil {
		t.Fatal(err)
	}
	k := l.connect(s.Kernel.ID)
	pid, _ := parseSelf(t, k.run(selfReport).stdout)

	e := l.kernels()[s.Kernel.ID]
	if e.PID != pid || !e.Supervised || e.RunID == "" {
		t.Fatalf("kernels: pid %d supervised %v run %q; the kernel is pid %d under %s", e.PID, e.Supervised, e.RunID, pid, renamed)
	}
	if exe, _ := os.Readlink("/proc/" + strconv.Itoa(e.PID) + "/exe"); strings.Contains(exe, "gpu-guard") {
		t.Fatalf("kernels reports the supervisor (%s) as the kernel", exe)
	}
	run := e.RunID
	if got := l.runName(run); got != "renamed.ipynb" {
		t.Errorf("the kernel's run is named %q, want renamed.ipynb", got)
	}

	cands := l.vg("__complete", "kernels", "shutdown", "--runtime-dir", l.runtime, "").Stdout
	if !strings.Contains(cands, s.Kernel.ID+"\t") || !strings.Contains(cands, "\nrenamed.ipynb\t") {
		t.Errorf("kernels shutdown completes to\n%s\nwant the kernel id and renamed.ipynb", cands)
	}

	// Killed once, restarted by Jupyter: the same run goes on.
	syscall.Kill(pid, syscall.SIGKILL)
	var last kernelEntry
	testbin.WaitFor(t, 45*time.Second, "Jupyter to restart the killed kernel", func() bool {
		last = l.kernels()[s.Kernel.ID]
		return last.PID != 0 && last.PID != pid
	}, func() { t.Logf("last seen: %+v", last) })
	// What kernels shows from the restart on is the new kernel, never its
	// supervisor starting up.
	pid2, _ := parseSelf(t, l.connect(s.Kernel.ID).run(selfReport).stdout)
	if last.PID != pid2 || !last.Supervised || last.RunID != run {
		t.Errorf("after the restart kernels showed pid %d supervised %v run %q; the kernel is pid %d of run %s",
			last.PID, last.Supervised, last.RunID, pid2, run)
	}
	l.wantRunsLine(run, "running after killed")

	if r := l.vg("kernels", "shutdown", "renamed.ipynb", "--runtime-dir", l.runtime, "--gpu-backend", "none"); r.Code != 0 {
		t.Fatalf("kernels shutdown: exit %d: %s", r.Code, r.Stderr)
	}
	testbin.WaitFor(t, 20*time.Second, "the run to end", func() bool { return l.explain(run)["status"] == "finished" })
	l.wantRunsLine(run, "success after killed")
}

// wantRunsLine checks run's line of `runs` on an 80-column terminal.
func (l *lab) wantRunsLine(run, status string) {
	l.t.Helper()
	r := testbin.Run(l.t, testbin.Command(l.t, append(l.env(), "COLUMNS=80"), l.bin, "runs"))
	for _, line := range strings.Split(r.Stdout, "\n") {
		if utf8.RuneCountInString(line) > 80 {
			l.t.Errorf("runs: a line wider than 80 columns: %q", line)
		}
		if strings.HasPrefix(line, run) && !strings.Contains(line, "  "+status+"  ") {
			l.t.Errorf("runs: %q, want status %q", line, status)
		}
	}
	if !strings.Contains(r.Stdout, run) {
		l.t.Errorf("runs lacks %s:\n%s", run, r.Stdout)
	}
}

func (l *lab) runName(run string) string {
	l.t.Helper()
	var runs []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	l.vg("runs", "--json").JSON(l.t, &runs)
	for _, r := range runs {
		if r.ID == run {
			return r.Name
		}
	}
	l.t.Fatalf("runs --json lacks %s", run)
	return ""
}
