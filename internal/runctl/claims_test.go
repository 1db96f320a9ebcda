package runctl

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// claimUser adds a throwaway user, removed when the test ends, and returns
// its UID.
func claimUser(t *testing.T, name string) int {
	t.Helper()
	testbin.NeedRoot(t, "this test adds users and runs processes as them")
	return testbin.User(t, name)
}

// claimJob starts, as uid, a job below a process whose command line says
// `__shim`, with VRAMGUARD_RUN_ID=id in its environment, and returns the
// job's PID.
func claimJob(t *testing.T, uid int, id string) int {
	t.Helper()
	c := exec.Command("sh", "-c", "sleep 600; :", ShimCommand)
	c.Env = append(os.Environ(), "VRAMGUARD_RUN_ID="+id)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); c.Wait() })
	var pid int
	testbin.WaitFor(t, 10*time.Second, "the job below the shim", func() bool {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(c.Process.Pid), "-x", "sleep").Output()
		pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
		return pid > 0
	})
	return pid
}

// TestRunClaims: the run id in a job's environment is the job's word, so it
// stands only for the claimant's own runs. Real processes of two throwaway
// users: bob's job claims his run first and is taken as it; alice's jobs
// claiming bob's run id, or a run of the store's own user (root's here),
// are taken as no run; a run the store records is found by its job only
// while its supervisor is the job's parent's parent (a reused PID is no
// run).
func TestRunClaims(t *testing.T) {
	sfx := strconv.Itoa(os.Getpid() % 100000)
	alice, bob := claimUser(t, "vgcla"+sfx), claimUser(t, "vgclb"+sfx)
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const rootRun, bobRun = "20261203-090000-aaaaaa", "20261203-090500-bbbbbb"
	sup := exec.Command("sleep", "600") // root's supervisor
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sup.Process.Kill(); sup.Wait() }()
	if err := st.CreateRun(ctx, &store.Run{ID: rootRun, Name: "root-train", Status: store.StatusRunning, StartedAt: time.Now(), SupervisorPID: sup.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	h := NewStoreHints(st, t.TempDir(), nil)
	bobJob := claimJob(t, bob, bobRun)
	if id, _, ok := h.RunForPID(bobJob); !ok || id != bobRun {
		t.Fatalf("bob's own run: %q %v, want %s", id, ok, bobRun)
	}
	for _, tt := range []struct{ what, id string }{{"bob's run", bobRun}, {"root's run", rootRun}} {
		pid := claimJob(t, alice, tt.id)
		if id, _, ok := h.RunForPID(pid); ok {
			t.Errorf("alice's job claiming %s is taken as run %q", tt.what, id)
		}
	}
	// the store's run with a job PID of alice's (a PID its job left): no run
	pid := claimJob(t, alice, "")
	if err := st.SetJobPID(ctx, rootRun, pid); err != nil {
		t.Fatal(err)
	}
	h = NewStoreHints(st, t.TempDir(), nil)
	if id, _, ok := h.RunForPID(pid); ok {
		t.Errorf("a process at the recorded job PID, not below the run's supervisor, is taken as run %q", id)
	}
}
