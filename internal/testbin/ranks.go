package testbin

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RankJob is a 2-rank job started the way torchrun starts one: a launcher
// (a shell named torchrun, whose environment names no rank) starts rank 1,
// then rank 0 (shells named python, with RANK, LOCAL_RANK and WORLD_SIZE
// set), and each rank forks two workers (sleeps) that inherit its
// environment. The names are what attribution roots a job by.
type RankJob struct {
	Launcher int
	Rank     [2]int
	// Dir holds the launcher's and the ranks' executables (torchrun,
	// python).
	Dir string
}

// StartRankJob starts a RankJob in its own process group, killed when the
// test ends. rank1Env is added to rank 1's environment (e.g.
// "VRAMGUARD_NODE=n1"). It returns once both ranks have forked their
// workers.
func StartRankJob(t testing.TB, rank1Env ...string) RankJob {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{"torchrun", "python"} {
		if err := os.Symlink("/bin/sh", filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	script := "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 " + strings.Join(rank1Env, " ") + ` "$D/python" -c 'sleep 120 & sleep 120; wait' & echo $!
RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 "$D/python" -c 'sleep 120 & sleep 120; wait' & echo $!
wait`
	cmd := exec.Command(filepath.Join(dir, "torchrun"), "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "D=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	job := RankJob{Launcher: cmd.Process.Pid, Dir: dir}
	sc := bufio.NewScanner(out)
	for _, r := range []int{1, 0} {
		if !sc.Scan() {
			t.Fatal("the launcher did not say its ranks' PIDs")
		}
		if job.Rank[r], err = strconv.Atoi(strings.TrimSpace(sc.Text())); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range job.Rank {
		for i := 0; len(Children(r)) < 2; i++ {
			if i > 500 {
				t.Fatalf("rank pid %d never forked its workers", r)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(200 * time.Millisecond) // the workers have exec'd sleep
	return job
}

// Children is pid's child processes, from /proc.
func Children(pid int) []int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	var cs []int
	for _, f := range strings.Fields(string(b)) {
		c, _ := strconv.Atoi(f)
		cs = append(cs, c)
	}
	return cs
}
