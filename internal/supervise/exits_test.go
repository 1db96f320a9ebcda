package supervise

import (
	"bufio"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/procfs"
)

// A process another parent reaps (a rank its launcher waits for): its end
// and, on Linux 6.15 or later, its exit status, through a pidfd.
func TestExitWatchOfAGrandchild(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sh -c 'sleep 0.5; kill -SEGV $$' & echo $!; wait`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	w := newExitWatch(procfs.FS{}, time.Now)
	start := time.Now()
	w.watch(pid)
	w.watch(pid) // once
	deadline := time.Now().Add(10 * time.Second)
	for w.get(pid) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	seen := time.Now()
	w.finish(time.Second)
	e := w.get(pid)
	if e == nil {
		t.Fatal("its end was not seen")
	}
	// it slept 0.5 s, and the end is recorded as it came, not as it was
	// asked for: between the two, whatever the machine's load
	if d := e.t.Sub(start); d < 400*time.Millisecond || e.t.After(seen) {
		t.Errorf("ended %s after the watch began, seen %s after it: want at least its 0.5 s sleep, and no later than seen", d, seen.Sub(start))
	}
	var u unix.Utsname
	unix.Uname(&u)
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	if major > 6 || (major == 6 && minor >= 15) {
		if e.status == nil || e.status.Signal != syscall.SIGSEGV {
			t.Errorf("status %+v from %q, want SIGSEGV", e.status, e.from)
		}
	}
	if got := w.sigkilled(); len(got) != 0 {
		t.Errorf("sigkilled %v", got)
	}
}
