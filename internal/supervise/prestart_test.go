package supervise

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestPrestartedShim: a shim started ahead runs the first attempt's job
// with the argv, environment and directory it is told later (not its
// own), as its own child.
func TestPrestartedShim(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := PrestartShim(self, []string{"shown", "only"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// set after the shim started: the job can only have it from the spec
	t.Setenv("VG_PRESTART_CHECK", "from-the-spec")
	dir := t.TempDir()
	h := start(t, []string{"sh", "-c", `echo "job ppid=$PPID env=$VG_PRESTART_CHECK dir=$(pwd) arg=$0"`, "zero"},
		Options{Prestarted: sh, Dir: dir})
	<-h.done
	if h.err != nil {
		t.Fatal(h.err)
	}
	m := regexp.MustCompile(`job ppid=(\d+) env=(\S*) dir=(\S*) arg=(\S*)`).FindStringSubmatch(h.out.String())
	if m == nil {
		t.Fatalf("no job line in %q", h.out.String())
	}
	if ppid, _ := strconv.Atoi(m[1]); ppid != sh.pid {
		t.Errorf("the job's parent is %d, want the shim started ahead (%d)", ppid, sh.pid)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if m[2] != "from-the-spec" || (m[3] != dir && m[3] != real) || m[4] != "zero" {
		t.Errorf("job saw env %q dir %q $0 %q; want from-the-spec, %s, zero", m[2], m[3], m[4], dir)
	}
	if h.res.ExitStatus != 0 {
		t.Errorf("exit status %d", h.res.ExitStatus)
	}
}

// TestPrestartedShimAborted: a shim started ahead that is never told what
// to run exits by itself when the supervisor says so, and Abort reaps it.
func TestPrestartedShimAborted(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := PrestartShim(self, []string{"true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sh.Abort(); sh.Abort(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the shim did not exit after Abort")
	}
	if err := syscall.Kill(sh.pid, 0); err != syscall.ESRCH {
		t.Errorf("shim %d still there after Abort: %v", sh.pid, err)
	}
	if err := sh.Run([]string{"true"}, nil, ""); err == nil {
		t.Error("Run after Abort succeeded")
	}
}
