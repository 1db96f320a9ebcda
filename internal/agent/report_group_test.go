package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/usage"
)

// TestGroupReport: the Slurm tasks of job 55 are real processes whose
// environments say what srun gives them (ranks 0 and 1 on node a, rank 2
// on node b; 2048 MiB asked per node); job 56 is another. Over 120
// samples, a second apart, rank 0 holds 2 GiB of GPU 0's 80 GiB, then 6
// GiB from 30 s, busy until 60 s and idle after; rank 1 holds 10 GiB of
// GPU 1's 40 GiB, idle throughout. report --group 55 on node a's agent
// gives ranks 0 and 1 only, with those peaks against their GPUs' totals,
// busy and idle hours as counted here, and host memory peaks (the RSS of
// each rank's processes, read here from /proc) against the 2 GiB asked.
func TestGroupReport(t *testing.T) {
	start := func(env ...string) int {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", "sleep 120 & sleep 120; wait")
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "SLURM_NTASKS=3", "SLURM_MEM_PER_NODE=2048"}, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	pids := map[string]int{
		"R0": start("SLURM_JOB_ID=55", "SLURM_PROCID=0", "SLURMD_NODENAME=a"),
		"R1": start("SLURM_JOB_ID=55", "SLURM_PROCID=1", "SLURMD_NODENAME=a"),
		"R2": start("SLURM_JOB_ID=55", "SLURM_PROCID=2", "SLURMD_NODENAME=b"),
		"O":  start("SLURM_JOB_ID=56", "SLURM_PROCID=0", "SLURMD_NODENAME=a"),
	}
	sc := `{"name": "group", "duration": "10m",
  "devices": [{"name": "GPU", "uuid": "GPU-0", "total": "80GiB"}, {"name": "GPU", "uuid": "GPU-1", "total": "40GiB"}],
  "processes": [
    {"pid": "$R0", "device": 0, "memory": [["0s", "2GiB"], ["29.999s", "2GiB"], ["30s", "6GiB"]], "sm_util": [["0s", 50], ["59.999s", 50], ["60s", 0]]},
    {"pid": "$R1", "device": 1, "memory": "10GiB", "sm_util": 0},
    {"pid": "$R2", "device": 0, "memory": "7GiB", "sm_util": 90},
    {"pid": "$O", "device": 1, "memory": "3GiB", "sm_util": 90}]}`
	r := newRigEnv(t, sc, Config{Log: discardLog(), Node: "a"}, nil, func(k string) string { return strconv.Itoa(pids[k]) })
	waitChildren(t, pids["R0"], pids["R1"])
	time.Sleep(300 * time.Millisecond) // the sleeps have loaded
	start0 := r.clk.Now()
	const n = 120
	r.step(n)
	rss := map[int]float64{}
	for i, k := range []string{"R0", "R1"} {
		for _, p := range treeOf(t, pids[k]) {
			rss[i] += float64(statRSS(t, p))
		}
	}
	h := func(samples float64) float64 { return samples / 3600 }
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	check := func(rep usage.GroupReport) {
		t.Helper()
		b, _ := json.MarshalIndent(rep, "", " ")
		if rep.Group != "55" || len(rep.Ranks) != 2 || len(rep.Nodes) != 1 {
			t.Fatalf("group %q: %d ranks, %d nodes; want ranks 0 and 1 of node a\n%s", rep.Group, len(rep.Ranks), len(rep.Nodes), b)
		}
		want := []struct {
			peak, total        int64
			busy, idle         float64
			rank               int
			hostRSS, tolerance float64
		}{
			{6 << 30, 80 << 30, h(60), h(60), 0, rss[0], 3 * 64 << 10},
			{10 << 30, 40 << 30, 0, h(n), 1, rss[1], 3 * 64 << 10},
		}
		for i, w := range want {
			g := rep.Ranks[i]
			if g.Node != "a" || len(g.Ranks) != 1 || g.Ranks[0] != w.rank {
				t.Errorf("row %d: node %s ranks %v, want rank %d on a", i, g.Node, g.Ranks, w.rank)
			}
			if g.GPUPeakBytes != w.peak || g.GPUTotalBytes != w.total || !near(g.GPUPeakFraction, float64(w.peak)/float64(w.total)) {
				t.Errorf("rank %d: GPU peak %d of %d (%.4f), want %d of %d", w.rank, g.GPUPeakBytes, g.GPUTotalBytes, g.GPUPeakFraction, w.peak, w.total)
			}
			if !near(g.BusyHours, w.busy) || !near(g.IdleHours, w.idle) || !near(g.HeldHours, h(n)) {
				t.Errorf("rank %d: busy %v idle %v held %v, want %v %v %v", w.rank, g.BusyHours, g.IdleHours, g.HeldHours, w.busy, w.idle, h(n))
			}
			if absDiff(float64(g.HostPeakBytes), w.hostRSS) > w.tolerance || g.HostPeakBytes <= 0 {
				t.Errorf("rank %d: host peak %d, its processes' RSS is %.0f", w.rank, g.HostPeakBytes, w.hostRSS)
			}
		}
		nd := rep.Nodes[0]
		if nd.Node != "a" || fmt.Sprint(nd.Ranks) != "[0 1]" || nd.GPUPeakBytes != 16<<30 || nd.HostRequestBytes != 2<<30 {
			t.Errorf("node %+v, want a with ranks 0 and 1, 16 GiB of GPU memory at its peak, 2 GiB asked", nd)
		}
		if absDiff(float64(nd.HostPeakBytes), rss[0]+rss[1]) > 6*64<<10 || !near(nd.HostPeakFraction, float64(nd.HostPeakBytes)/float64(2<<30)) {
			t.Errorf("node a: host peak %d (%.4f of the request), its ranks' RSS is %.0f", nd.HostPeakBytes, nd.HostPeakFraction, rss[0]+rss[1])
		}
		if !near(nd.BusyHours, h(60)) || !near(nd.IdleHours, h(60+n)) {
			t.Errorf("node a: busy %v idle %v", nd.BusyHours, nd.IdleHours)
		}
	}
	rep, err := r.ag.GroupReport(context.Background(), "55", start0.Add(-time.Second), r.clk.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(rep)
	code, body := r.do("GET", "/api/v1/report?group=55&range=1h", "", "")
	var api usage.GroupReport
	if err := json.Unmarshal([]byte(body), &api); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/report?group=55: %d %v %s", code, err, body)
	}
	check(api)
	if code, body := r.do("GET", "/api/v1/report?group=57&range=1h", "", ""); code != 200 || !json.Valid([]byte(body)) {
		t.Errorf("a group with no job here: %d %s", code, body)
	}
}
