package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestServePrometheusScrape runs Debian's prometheus (package prometheus)
// with deploy/prometheus/rules.yml against `serve --simulate
// workstation.json`, waits for a scrape, and reads the notebook kernel's
// memory back through Prometheus' query API, per GPU and through the
// recording rule. It also runs `promtool check metrics` on what the real
// binary serves.
func TestServePrometheusScrape(t *testing.T) {
	t.Parallel()
	testbin.Need(t, testbin.Prometheus)
	s := startServe(t, "", "--simulate", "../examples/scenarios/workstation.json")
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	check := exec.Command("promtool", "check", "metrics")
	check.Stdin = bytes.NewReader(metrics)
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}

	dir := t.TempDir()
	cfg := prometheusConfig(t, s.URL)
	port, logb := startPrometheus(t, dir, cfg)

	// The notebook kernel's memory, on the GPU it runs on (labelled as the
	// device series are), and its total through the recording rule.
	m, got := promQuery(t, port, `vramguard_job_gpu_memory_bytes{kind="notebook"}`, logb)
	if m["job"] != "vramguard" || m["job_name"] != "kernel 7c1e0f52" || m["notebook"] != "7c1e0f52-9d1b-4c47-a1f3-5b0b8a6e2d11" ||
		m["gpu"] != "1" || m["uuid"] != "GPU-5d2f3a10-0000-4000-8000-000000000001" {
		t.Fatalf("series labels %v", m)
	}
	if got != "9663676416" {
		t.Fatalf("notebook GPU memory through Prometheus = %s, want 9663676416 (9 GiB)", got)
	}
	if _, got := promQuery(t, port, `job_name:vramguard_job_gpu_memory_bytes:sum{kind="notebook"}`, logb); got != "9663676416" {
		t.Fatalf("the recording rule's notebook total = %s, want 9663676416 (9 GiB)", got)
	}
	// The DDP job holds memory on both GPUs: one series each, joining the
	// device series on uuid.
	if _, got := promQuery(t, port, `count(vramguard_job_gpu_memory_bytes{kind="process"} * on(uuid) group_left() (vramguard_device_memory_total_bytes > 0))`, logb); got != "2" {
		t.Fatalf("the DDP job's per-GPU series joined with the devices': %s, want 2", got)
	}
}

// promQuery polls Prometheus' instant query API (at most 40 s) until expr
// has exactly one result and returns its labels and value.
func promQuery(t *testing.T, port int, expr string, logb *bytes.Buffer) (map[string]string, string) {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		series, err := promInstant(port, expr)
		if err == nil && len(series) == 1 {
			v, _ := series[0].Value[1].(string)
			return series[0].Metric, v
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus never returned one series for %s (last err %v, %d series)\n%s", expr, err, len(series), tail(logb.String(), 2000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promSeries is one series of an instant query's result: its labels and
// its [time, "value"] pair.
type promSeries struct {
	Metric map[string]string
	Value  []any
}

// promInstant asks Prometheus' instant query API for expr once and returns
// the series it selects now.
func promInstant(port int, expr string) ([]promSeries, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v1/query?%s", port, url.Values{"query": {expr}}.Encode()))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct{ Data struct{ Result []promSeries } }
	if err := jsonDecode(resp.Body, &r); err != nil {
		return nil, err
	}
	return r.Data.Result, nil
}

// TestPrometheusRules checks deploy/prometheus/rules.yml with promtool and
// runs its unit tests, and that every alert rule has a test.
func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	testbin.Need(t, testbin.Prometheus)
	rules, tests := "../deploy/prometheus/rules.yml", "../deploy/prometheus/rules_test.yml"
	if out, err := exec.Command("promtool", "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := exec.Command("promtool", "test", "rules", tests).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	alerts := names(t, rules, `(?m)^\s*-?\s*alert:\s*(\S+)`)
	tested := map[string]bool{}
	for _, n := range names(t, tests, `(?m)alertname:\s*(\S+)`) {
		tested[n] = true
	}
	if len(alerts) < 4 {
		t.Fatalf("only %d alert rules: %v", len(alerts), alerts)
	}
	for _, a := range alerts {
		if !tested[a] {
			t.Errorf("alert %s has no promtool test", a)
		}
	}
}

func names(t *testing.T, path, re string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(b), -1) {
		seen[m[1]] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// prometheusConfig is a Prometheus configuration that scrapes the serve
// agents at urls every second and evaluates the project's rules.
func prometheusConfig(t *testing.T, urls ...string) string {
	t.Helper()
	targets := make([]string, len(urls))
	for i, u := range urls {
		targets[i] = strconv.Quote(strings.TrimPrefix(u, "http://"))
	}
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: vramguard
    static_configs:
      - targets: [%s]
`, mustAbs(t, "../deploy/prometheus/rules.yml"), strings.Join(targets, ", "))
}

// startPrometheus runs a real Prometheus (Debian's package) with the
// configuration cfg, its data under dir, on a free loopback port; logb
// collects its output for failure messages.
func startPrometheus(t *testing.T, dir, cfg string) (port int, logb *bytes.Buffer) {
	testbin.Need(t, testbin.Prometheus)
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port = testbin.FreePort(t)
	prom := exec.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	logb = &bytes.Buffer{}
	prom.Stdout, prom.Stderr = logb, logb
	prom.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := prom.Start(); err != nil {
		t.Fatalf("start prometheus (Debian package prometheus): %v", err)
	}
	t.Cleanup(func() { prom.Process.Signal(syscall.SIGTERM); prom.Wait() })
	return port, logb
}

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
	t.Parallel()
	const group = "job-e2e-16"
	rs := make([]clusterRank, 4)
	for r := range rs {
		rs[r] = clusterRank{node: "a", rank: r, gpuMiB: 1000 * (r + 1), gpuN: r % 2}
		if r >= 2 {
			rs[r].node = "b"
		}
		// each rank holds its own amount of host memory, touched
		rs[r].pid = startRank(t, r, 20*(r+1), "VRAMGUARD_GROUP="+group, "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r%2),
			"WORLD_SIZE=4", "VRAMGUARD_NODE="+rs[r].node)
	}
	port, logb, agents := startCluster(t, rs)
	checkClusterRanks(t, port, logb, agents, group, rs)
	// the ranks' own allocations (20, 40, 60, 80 MiB) are in their RSS
	var rss uint64
	for _, r := range rs {
		rss += statRSSBytes(t, r.pid)
	}
	if rss < 200<<20 {
		t.Fatalf("ranks' RSS %d: below what they allocated", rss)
	}
}

// clusterRank is one rank of a job on the cluster of startCluster: the
// node it runs on, its process and the GPU memory (MiB) the scenario gives
// that process.
type clusterRank struct {
	node         string
	rank, pid    int
	gpuMiB, gpuN int // gpuN: the simulated GPU it holds memory on
}

// startCluster stands one `vramguard serve --node NODE` on loopback for
// each node of rs, all with one scenario GPU backend that gives each
// rank's process its GPU memory, and one real Prometheus scraping them
// with deploy/prometheus/rules.yml. It returns Prometheus's port, its log
// and each node's agent.
func startCluster(t *testing.T, rs []clusterRank) (int, *bytes.Buffer, map[string]*server) {
	t.Helper()
	var procs []string
	for _, r := range rs {
		procs = append(procs, fmt.Sprintf(`{"pid": %d, "device": %d, "memory": "%dMiB"}`, r.pid, r.gpuN, r.gpuMiB))
	}
	dir := t.TempDir()
	scen := filepath.Join(dir, "ranks.json")
	if err := os.WriteFile(scen, []byte(`{"name": "ranks", "duration": "10m", "devices": [
  {"name": "GPU", "uuid": "GPU-e2e-0", "total": "80GiB"}, {"name": "GPU", "uuid": "GPU-e2e-1", "total": "80GiB"}],
  "processes": [`+strings.Join(procs, ",\n")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	agents := map[string]*server{}
	var urls []string
	for _, r := range rs {
		if agents[r.node] == nil {
			agents[r.node] = startServe(t, "", "--simulate", scen, "--node", r.node, "--probe-socket", "none")
			urls = append(urls, agents[r.node].URL)
		}
	}
	port, logb := startPrometheus(t, dir, prometheusConfig(t, urls...))
	return port, logb, agents
}

// checkClusterRanks checks group's ranks rs through Prometheus: each
// node's agent exports exactly that node's ranks of the group (labelled
// group, node, rank), the recording rules' job totals are the sums over
// all of rs (GPU memory as the scenario gives it, host memory as this test
// reads the ranks' RSS from /proc) and the per-node sums cover only each
// node's ranks.
func checkClusterRanks(t *testing.T, port int, logb *bytes.Buffer, agents map[string]*server, group string, rs []clusterRank) {
	t.Helper()
	nodeRanks := map[string][]string{}
	for _, r := range rs {
		nodeRanks[r.node] = append(nodeRanks[r.node], strconv.Itoa(r.rank))
	}
	for node, want := range nodeRanks {
		sort.Strings(want)
		sel := `vramguard_rank_host_memory_bytes{group="` + group + `",node="` + node + `"}`
		for deadline, got := time.Now().Add(40*time.Second), []string(nil); strings.Join(got, " ") != strings.Join(want, " "); time.Sleep(250 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s's ranks of group %s through Prometheus: %v, want %v (the groups there: %v)", node, group, got, want,
					promValues(t, port, `count by (group) (vramguard_rank_host_memory_bytes)`, "group"))
			}
			got = promValues(t, port, sel, "rank")
		}
		inst := strings.TrimPrefix(agents[node].URL, "http://")
		for _, got := range promValues(t, port, sel, "instance") {
			if got != inst {
				t.Fatalf("node %s's ranks of %s scraped from %s, want its agent %s", node, group, got, inst)
			}
		}
	}

	// (The rules are evaluated every second, so a first evaluation may
	// predate a node's first scrape: wait for the figure.)
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
	// The ranks hold still after their allocation; a sample's RSS may
	// differ from now by a few pages.
	near := func(want float64) func(float64) bool {
		return func(got float64) bool { return got >= want-1<<20 && got <= want+1<<20 }
	}
	gpu, rss := map[string]int{}, map[string]float64{}
	for _, r := range rs {
		for _, k := range []string{"", r.node} {
			gpu[k] += r.gpuMiB << 20
			rss[k] += float64(statRSSBytes(t, r.pid))
		}
	}
	for k := range gpu {
		rule, sel, where := "group", `{group="`+group+`"}`, "across nodes"
		if k != "" {
			rule, sel, where = "group_node", `{group="`+group+`",node="`+k+`"}`, "on node "+k
		}
		eventually("job "+group+"'s GPU memory "+where, rule+":vramguard_rank_gpu_memory_bytes:sum"+sel, is(gpu[k]),
			fmt.Sprintf("its ranks' %d MiB", gpu[k]>>20))
		eventually("job "+group+"'s host memory "+where, rule+":vramguard_rank_host_memory_bytes:sum"+sel, near(rss[k]),
			fmt.Sprintf("%.0f (from /proc) within 1 MiB", rss[k]))
	}
}

// promValues returns the values of label in each series expr selects now,
// sorted (nil when the query fails).
func promValues(t *testing.T, port int, expr, label string) []string {
	t.Helper()
	series, err := promInstant(port, expr)
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range series {
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

// slurmRankPy is each task of TestServeClusterSlurm's jobs: it holds its
// own host memory (its argument in MiB times its task number plus one),
// touched, writes its PID and node to rank-JOBID-TASK and sleeps.
const slurmRankPy = `import os, sys, time
task = int(os.environ["SLURM_PROCID"])
b = bytearray(int(sys.argv[1]) * (task + 1) << 20)
for i in range(0, len(b), 4096): b[i] = 1
name = "rank-%s-%d" % (os.environ["SLURM_JOB_ID"], task)
with open(name + ".tmp", "w") as f: f.write("%d %s\n" % (os.getpid(), os.environ["SLURMD_NODENAME"]))
os.rename(name + ".tmp", name)
time.sleep(300)
`

// TestServeClusterSlurm: TestServeClusterRanks' agents and Prometheus, one
// agent per node of a real two-node Slurm (serve --node n1, --node n2),
// and two real jobs of two tasks, one task on each node: one started as
// docs/CLUSTER.md starts a job (srun vramguard run -- python3 ...), the
// other plain srun python3. Each job's rank series carry the job id sbatch
// printed as their group, each node's agent exports the task Slurm ran
// there (rank SLURM_PROCID, world size SLURM_NTASKS), no other group
// appears, and each job's sums across nodes and per node are its tasks'.
func TestServeClusterSlurm(t *testing.T) {
	t.Parallel()
	c := testbin.StartSlurm(t)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "rank.py"), []byte(slurmRankPy), 0o644); err != nil {
		t.Fatal(err)
	}
	// the jobs run with the submitter's environment (sbatch --export=ALL)
	c.Env = append(c.Env, "VRAMGUARD_HOME="+filepath.Join(work, "state"), "VRAMGUARD="+bin, "PYTHON="+python)
	var ids []string
	jobs := map[string][]clusterRank{}
	for i, run := range []string{`"$VRAMGUARD" run --name ranks -- "$PYTHON" rank.py 20`, `"$PYTHON" rank.py 30`} {
		id := c.Sbatch(work, "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=5\n#SBATCH --output=job-%j.out\nsrun "+run+"\n")
		ids = append(ids, id)
		c.WaitRunning(id, time.Minute)
		for task := range 2 {
			var b []byte
			waitFor(t, time.Minute, fmt.Sprintf("job %s's task %d to start", id, task), func() bool {
				var err error
				b, err = os.ReadFile(filepath.Join(work, fmt.Sprintf("rank-%s-%d", id, task)))
				return err == nil
			})
			r := clusterRank{rank: task, gpuMiB: 1000 * (2*i + task + 1), gpuN: task}
			if _, err := fmt.Sscan(string(b), &r.pid, &r.node); err != nil {
				t.Fatalf("job %s's task %d wrote %q: %v", id, task, b, err)
			}
			jobs[id] = append(jobs[id], r)
		}
		if jobs[id][0].node == jobs[id][1].node {
			t.Fatalf("job %s's tasks both ran on %s: the job did not span the nodes", id, jobs[id][0].node)
		}
	}
	port, logb, agents := startCluster(t, append(append([]clusterRank(nil), jobs[ids[0]]...), jobs[ids[1]]...))
	for _, id := range ids {
		checkClusterRanks(t, port, logb, agents, id, jobs[id])
		if got := promValues(t, port, `vramguard_rank_host_memory_bytes{group="`+id+`"}`, "world_size"); strings.Join(got, " ") != "2 2" {
			t.Errorf("job %s's ranks' world_size %v, want SLURM_NTASKS 2 on both", id, got)
		}
	}
	sort.Strings(ids)
	if got := promValues(t, port, `count by (group) (vramguard_rank_host_memory_bytes)`, "group"); strings.Join(got, " ") != strings.Join(ids, " ") {
		t.Errorf("rank series of groups %v, want only the jobs %v", got, ids)
	}
}

// startRank starts rank r of a distributed job: a process, in its own
// process group with this process's environment and env added, that holds
// hostMiB MiB of host memory it has touched; it returns the PID once the
// memory is held, and kills the process when the test ends.
func startRank(t *testing.T, r, hostMiB int, env ...string) int {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", fmt.Sprintf(
		"import time\nb = bytearray(%d << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ready', flush=True)\ntime.sleep(120)\n", hostMiB))
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("rank %d: %q", r, line)
	}
	return cmd.Process.Pid
}
