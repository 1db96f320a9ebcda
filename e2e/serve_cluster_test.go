package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeClusterRanks stands two `vramguard serve` agents on loopback in
// for two nodes (--node a, --node b) and one real Prometheus scraping both
// with deploy/prometheus/rules.yml. A 4-rank job of real Python processes
// runs on this machine: ranks 0 and 1 say (VRAMGUARD_NODE) they run on a,
// ranks 2 and 3 on b, so each agent exports only its own two, as on two
// machines. The scenario GPU backend gives each rank's real PID GPU memory.
// Through Prometheus, the recording rules' job totals (host and GPU) are
// the sums over all four ranks (host memory as this test reads it from
// /proc), and the per-node sums cover only each node's ranks.
func TestServeClusterRanks(t *testing.T) {
	const group = "job-e2e-16"
	gpuMiB := []int{1000, 2000, 3000, 4000}
	pids := make([]int, 4)
	for r := range 4 {
		node := "a"
		if r >= 2 {
			node = "b"
		}
		// each rank holds its own amount of host memory, touched
		cmd := exec.Command("/usr/bin/python3", "-c", fmt.Sprintf(
			"import sys, time\nb = bytearray(%d << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ready', flush=True)\ntime.sleep(120)\n", 20*(r+1)))
		cmd.Env = append(os.Environ(), "VRAMGUARD_GROUP="+group, "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r%2),
			"WORLD_SIZE=4", "VRAMGUARD_NODE="+node)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "ready\n" {
			t.Fatalf("rank %d: %q", r, line)
		}
		pids[r] = cmd.Process.Pid
		t.Setenv(fmt.Sprintf("VG_RANK%d_PID", r), strconv.Itoa(cmd.Process.Pid))
	}
	var procs []string
	for r := range 4 {
		procs = append(procs, fmt.Sprintf(`{"pid": "$VG_RANK%d_PID", "device": %d, "memory": "%dMiB"}`, r, r%2, gpuMiB[r]))
	}
	dir := t.TempDir()
	scen := filepath.Join(dir, "ranks.json")
	if err := os.WriteFile(scen, []byte(`{"name": "ranks", "duration": "10m", "devices": [
  {"name": "GPU", "uuid": "GPU-e2e-0", "total": "80GiB"}, {"name": "GPU", "uuid": "GPU-e2e-1", "total": "80GiB"}],
  "processes": [`+strings.Join(procs, ",\n")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startServe(t, "", "--simulate", scen, "--node", "a", "--probe-socket", "none")
	b := startServe(t, "", "--simulate", scen, "--node", "b", "--probe-socket", "none")

	cfg := prometheusConfig(t, a.URL, b.URL)
	port, logb := startPrometheus(t, dir, cfg)

	// Each agent exports its own node's two ranks, nothing of the other's.
	for node, want := range map[string]string{"a": "0 1", "b": "2 3"} {
		waitFor(t, 40*time.Second, "node "+node+"'s ranks in Prometheus", func() bool {
			return strings.Join(promValues(t, port, `vramguard_rank_host_memory_bytes{group="`+group+`",node="`+node+`"}`, "rank"), " ") == want
		})
		if got := promValues(t, port, `vramguard_rank_host_memory_bytes{group="`+group+`",node="`+node+`"}`, "instance"); len(got) != 2 ||
			got[0] != got[1] || got[0] != strings.TrimPrefix(map[string]*server{"a": a, "b": b}[node].URL, "http://") {
			t.Fatalf("node %s's ranks scraped from %v", node, got)
		}
	}

	// The job's GPU memory over both nodes: the driver's records (the
	// scenario's) of all four ranks, summed by the recording rule.
	// (The rules are evaluated every second, so a first evaluation may
	// predate node b's first scrape: wait for the figure.)
	eventually := func(what, expr string, ok func(float64) bool, want string) {
		t.Helper()
		var v string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			_, v = promQuery(t, port, expr, logb)
			if f, err := strconv.ParseFloat(v, 64); err == nil && ok(f) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %s through Prometheus, want %s", what, v, want)
			}
		}
	}
	is := func(n int) func(float64) bool { return func(f float64) bool { return f == float64(n) } }
	eventually("the job's GPU memory across nodes", `group:vramguard_rank_gpu_memory_bytes:sum{group="`+group+`"}`,
		is((1000+2000+3000+4000)<<20), "all four ranks' 10000 MiB")
	eventually("the job's GPU memory on node b", `group_node:vramguard_rank_gpu_memory_bytes:sum{group="`+group+`",node="b"}`,
		is((3000+4000)<<20), "ranks 2 and 3's 7000 MiB")
	eventually("the job's GPU memory on node a", `group_node:vramguard_rank_gpu_memory_bytes:sum{group="`+group+`",node="a"}`,
		is((1000+2000)<<20), "ranks 0 and 1's 3000 MiB")

	// The job's host memory over both nodes, and per node, against the
	// ranks' RSS read here from /proc. The processes hold still after
	// their allocation; a sample's RSS may differ from now by a few pages.
	rss := make([]float64, 4)
	for r, p := range pids {
		rss[r] = float64(statRSSBytes(t, p))
	}
	near := func(what, expr string, want float64) {
		t.Helper()
		eventually(what, expr, func(got float64) bool { return got >= want-1<<20 && got <= want+1<<20 },
			fmt.Sprintf("%.0f (from /proc) within 1 MiB", want))
	}
	near("the job's host memory across nodes", `group:vramguard_rank_host_memory_bytes:sum{group="`+group+`"}`, rss[0]+rss[1]+rss[2]+rss[3])
	near("the job's host memory on node a", `group_node:vramguard_rank_host_memory_bytes:sum{group="`+group+`",node="a"}`, rss[0]+rss[1])
	near("the job's host memory on node b", `group_node:vramguard_rank_host_memory_bytes:sum{group="`+group+`",node="b"}`, rss[2]+rss[3])
	// the ranks' own allocations (20, 40, 60, 80 MiB) are in those figures
	if rss[0]+rss[1]+rss[2]+rss[3] < 200<<20 {
		t.Fatalf("ranks' RSS %v: below what they allocated", rss)
	}
}

// promValues returns the values of label in each series expr selects now,
// sorted (nil when the query fails).
func promValues(t *testing.T, port int, expr, label string) []string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v1/query?%s", port, url.Values{"query": {expr}}.Encode()))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct{ Metric map[string]string }
		}
	}
	if jsonDecode(resp.Body, &r) != nil {
		return nil
	}
	var out []string
	for _, s := range r.Data.Result {
		out = append(out, s.Metric[label])
	}
	sort.Strings(out)
	return out
}

// statRSSBytes is pid's RSS as /proc/PID/stat counts it (field 24, pages).
func statRSSBytes(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	pages, err := strconv.ParseUint(f[21], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * uint64(os.Getpagesize())
}
