package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestReportGroupTwoAgents: two `vramguard serve` agents stand in for
// nodes a and b of a Slurm job whose 4 tasks are real Python processes
// with the environment srun gives them (ranks 0 and 1 on a, 2 and 3 on b;
// --mem-per-cpu=512 on 2 CPUs a node: 1 GiB asked). The scenario gives
// each rank GPU memory on one of two 80 GiB GPUs, rank 1 and 3 idle (0%
// utilisation), 0 and 2 busy. report --group JOBID --url A --url B gives
// each node's ranks with those GPU peaks against 80 GiB, busy or idle all
// the time they held memory, and host memory peaks against the ranks' RSS
// read here from /proc and against the 1 GiB asked.
func TestReportGroupTwoAgents(t *testing.T) {
	t.Parallel()
	const jobID = "31337"
	gpuMiB, util := []int{1000, 2000, 3000, 4000}, []int{60, 0, 80, 0}
	pids := make([]int, 4)
	var procs []string
	for r := range 4 {
		node := "a"
		if r >= 2 {
			node = "b"
		}
		pids[r] = startRank(t, r, 30*(r+1), "SLURM_JOB_ID="+jobID, "SLURM_PROCID="+strconv.Itoa(r), "SLURM_NTASKS=4", "SLURM_LOCALID="+strconv.Itoa(r%2),
			"SLURMD_NODENAME="+node, "SLURM_MEM_PER_CPU=512", "SLURM_CPUS_ON_NODE=2")
		procs = append(procs, fmt.Sprintf(`{"pid": %d, "device": %d, "memory": "%dMiB", "sm_util": %d}`, pids[r], r%2, gpuMiB[r], util[r]))
	}
	scen := filepath.Join(t.TempDir(), "ranks.json")
	if err := os.WriteFile(scen, []byte(`{"name": "ranks", "duration": "10m", "devices": [
  {"name": "GPU", "uuid": "GPU-e2e-0", "total": "80GiB"}, {"name": "GPU", "uuid": "GPU-e2e-1", "total": "80GiB"}],
  "processes": [`+strings.Join(procs, ",\n")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startServe(t, "", "--simulate", scen, "--node", "a", "--probe-socket", "none")
	b := startServe(t, "", "--simulate", scen, "--node", "b", "--probe-socket", "none")
	type report struct {
		Nodes []struct {
			Node         string
			Ranks        []int
			GPUPeak      int64   `json:"gpu_peak_bytes"`
			HostPeak     int64   `json:"host_peak_bytes"`
			HostRequest  int64   `json:"host_request_bytes"`
			HostFraction float64 `json:"host_peak_fraction"`
			HeldHours    float64 `json:"held_hours"`
			BusyHours    float64 `json:"busy_hours"`
			IdleHours    float64 `json:"idle_hours"`
		}
		Ranks []struct {
			Node        string
			Ranks       []int
			GPUPeak     int64   `json:"gpu_peak_bytes"`
			GPUTotal    int64   `json:"gpu_total_bytes"`
			GPUFraction float64 `json:"gpu_peak_fraction"`
			HeldHours   float64 `json:"held_hours"`
			BusyHours   float64 `json:"busy_hours"`
			IdleHours   float64 `json:"idle_hours"`
			HostPeak    int64   `json:"host_peak_bytes"`
		}
	}
	var rep report
	env := append(os.Environ(), "VRAMGUARD_HOME="+t.TempDir())
	// each agent has sampled every rank of its node a few times
	waitFor(t, 40*time.Second, "5 s of both nodes' ranks in the agents' history", func() bool {
		r := testbin.Run(t, testbin.Vramguard(t, env, "report", "--group", jobID, "--agent", "none", "--url", a.URL, "--url", b.URL, "--json", "--since", "1h"))
		rep = report{}
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &rep) != nil || len(rep.Ranks) != 4 {
			return false
		}
		for _, rk := range rep.Ranks {
			if rk.HeldHours < 5.0/3600 {
				return false
			}
		}
		return true
	})
	rss := make([]float64, 4)
	for r, p := range pids {
		rss[r] = float64(statRSSBytes(t, p))
	}
	if len(rep.Nodes) != 2 || rep.Nodes[0].Node != "a" || fmt.Sprint(rep.Nodes[0].Ranks) != "[0 1]" || rep.Nodes[1].Node != "b" || fmt.Sprint(rep.Nodes[1].Ranks) != "[2 3]" {
		t.Fatalf("nodes %+v, want a with ranks 0 and 1, b with 2 and 3", rep.Nodes)
	}
	for i, rk := range rep.Ranks {
		wantNode := "a"
		if i >= 2 {
			wantNode = "b"
		}
		if rk.Node != wantNode || len(rk.Ranks) != 1 || rk.Ranks[0] != i {
			t.Errorf("row %d: node %s ranks %v", i, rk.Node, rk.Ranks)
		}
		if rk.GPUPeak != int64(gpuMiB[i])<<20 || rk.GPUTotal != 80<<30 || math.Abs(rk.GPUFraction-float64(gpuMiB[i]<<20)/float64(80<<30)) > 1e-12 {
			t.Errorf("rank %d: GPU peak %d of %d (%v), want %d MiB of 80 GiB", i, rk.GPUPeak, rk.GPUTotal, rk.GPUFraction, gpuMiB[i])
		}
		busy, idle := rk.HeldHours, 0.0
		if util[i] == 0 {
			busy, idle = 0, rk.HeldHours
		}
		if math.Abs(rk.BusyHours-busy) > 1e-9 || math.Abs(rk.IdleHours-idle) > 1e-9 {
			t.Errorf("rank %d (%d%% busy): busy %v idle %v of %v held", i, util[i], rk.BusyHours, rk.IdleHours, rk.HeldHours)
		}
		// the processes hold still once their memory is touched; a sample's
		// RSS may differ from now by a few pages
		if math.Abs(float64(rk.HostPeak)-rss[i]) > 256<<10 {
			t.Errorf("rank %d: host peak %d, its RSS is %.0f", i, rk.HostPeak, rss[i])
		}
	}
	for k, n := range rep.Nodes {
		sum := rss[2*k] + rss[2*k+1]
		if n.HostRequest != 1<<30 || math.Abs(float64(n.HostPeak)-sum) > 512<<10 || math.Abs(n.HostFraction-float64(n.HostPeak)/float64(1<<30)) > 1e-12 {
			t.Errorf("node %s: host peak %d (%v of %d asked), its ranks' RSS is %.0f of 1 GiB asked", n.Node, n.HostPeak, n.HostFraction, n.HostRequest, sum)
		}
		if n.GPUPeak != int64(gpuMiB[2*k]+gpuMiB[2*k+1])<<20 {
			t.Errorf("node %s: GPU peak %d, want its ranks' %d MiB", n.Node, n.GPUPeak, gpuMiB[2*k]+gpuMiB[2*k+1])
		}
	}
	text := testbin.Run(t, testbin.Vramguard(t, env, "report", "--group", jobID, "--agent", "none", "--url", a.URL, "--url", b.URL)).Stdout
	if !strings.Contains(text, "job "+jobID) || !strings.Contains(text, "1000 MiB") && !strings.Contains(text, "1000.0 MiB") {
		t.Errorf("report --group's table:\n%s", text)
	}
}
