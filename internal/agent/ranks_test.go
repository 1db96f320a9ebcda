package agent

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRankSeries starts real processes whose environments name their
// ranks the way launchers do (two on this node "a", two on "b", one of
// them with a forked worker, a launcher under srun, a process of no
// job), points a scenario's GPU records at them, and checks what node a's
// agent exports: ranks 0 and 1 only, each with the driver's memory on its
// GPU and the RSS of its processes as /proc/PID/stat counts it now.
func TestRankSeries(t *testing.T) {
	start := func(env ...string) int {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", "sleep 60 & sleep 60; wait")
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	job := []string{"VRAMGUARD_GROUP=job7", "WORLD_SIZE=4"}
	pids := map[string]int{}
	for r := range 4 {
		node := "a"
		if r >= 2 {
			node = "b"
		}
		pids[fmt.Sprintf("R%d", r)] = start(append(job, "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r%2), "VRAMGUARD_NODE="+node)...)
	}
	// torchrun under srun: its task id is not a worker's rank
	pids["L"] = start("VRAMGUARD_GROUP=job7", "SLURM_PROCID=0", "SLURM_NTASKS=2", "VRAMGUARD_NODE=a")
	pids["X"] = start("HOME=/tmp")
	sc := `{"name": "ranks", "duration": "10m",
  "devices": [{"name": "GPU", "uuid": "GPU-0", "total": "80GiB"}, {"name": "GPU", "uuid": "GPU-1", "total": "80GiB"}],
  "processes": [
    {"pid": "$R0", "device": 0, "memory": "3GiB"}, {"pid": "$R1", "device": 1, "memory": "5GiB"},
    {"pid": "$R2", "device": 0, "memory": "7GiB"}, {"pid": "$R3", "device": 1, "memory": "11GiB"},
    {"pid": "$L", "device": 0, "memory": "1MiB"}, {"pid": "$X", "device": 1, "memory": "2GiB"}]}`
	r := newRigEnv(t, sc, Config{Log: discardLog(), Node: "a"}, nil,
		func(k string) string { return strconv.Itoa(pids[k]) })
	// wait until each sh has forked its first sleep, so the tree is whole
	waitChildren(t, pids["R0"], pids["R1"])
	time.Sleep(300 * time.Millisecond) // and the sleeps have loaded
	r.step(1)
	m := scrape(t, r.ag)
	promtoolCheck(t, m)
	gpu := regexp.MustCompile(`(?m)^vramguard_rank_gpu_memory_bytes\{(.*)\} (\S+)$`).FindAllStringSubmatch(m, -1)
	want := map[string]string{
		`gpu="0",group="job7",local_rank="0",node="a",rank="0",uuid="GPU-0",world_size="4"`: strconv.Itoa(3 << 30),
		`gpu="1",group="job7",local_rank="1",node="a",rank="1",uuid="GPU-1",world_size="4"`: strconv.Itoa(5 << 30),
	}
	if len(gpu) != len(want) {
		t.Fatalf("rank GPU series %v, want %v\n%s", gpu, want, m)
	}
	for _, g := range gpu {
		if f, _ := strconv.ParseFloat(g[2], 64); want[g[1]] != strconv.FormatFloat(f, 'f', -1, 64) {
			t.Errorf("series {%s} = %s, want %q", g[1], g[2], want[g[1]])
		}
	}
	host := regexp.MustCompile(`(?m)^vramguard_rank_host_memory_bytes\{group="job7",local_rank="\d",node="a",rank="(\d)",world_size="4"\} (\S+)$`).FindAllStringSubmatch(m, -1)
	if len(host) != 2 || strings.Contains(m, `node="b"`) {
		t.Fatalf("rank host series %v, want ranks 0 and 1 of node a only\n%s", host, m)
	}
	for _, h := range host {
		got, _ := strconv.ParseFloat(h[2], 64)
		var tree uint64
		for _, p := range treeOf(t, pids["R"+h[1]]) {
			tree += statRSS(t, p)
		}
		if got <= 0 || absDiff(got, float64(tree)) > 3*64<<10 {
			t.Errorf("rank %s host memory %v, /proc's RSS of its tree %v %d; %+v", h[1], got, treeOf(t, pids["R"+h[1]]), tree, r.ag.Snapshot().Ranks)
		}
	}
}

// statRSS is pid's resident set size as /proc/PID/stat counts it (field
// 24, in pages).
func statRSS(t *testing.T, pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	pages, err := strconv.ParseUint(f[21], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * uint64(os.Getpagesize())
}

// treeOf is pid and its descendants, from /proc.
func treeOf(t *testing.T, pid int) []int {
	out := []int{pid}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		c, _ := strconv.Atoi(f)
		out = append(out, treeOf(t, c)...)
	}
	return out
}

func waitChildren(t *testing.T, pids ...int) {
	t.Helper()
	for _, p := range pids {
		for i := 0; len(treeOf(t, p)) < 3; i++ {
			if i > 200 {
				t.Fatalf("pid %d never forked", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func absDiff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}
