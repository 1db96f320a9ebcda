package e2e

import (
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
