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
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServePrometheusScrape runs Debian's prometheus (package prometheus)
// against `serve --simulate workstation.json`, waits for a scrape, and reads
// the notebook kernel's memory back through Prometheus' query API. It also
// runs `promtool check metrics` on what the real binary serves.
func TestServePrometheusScrape(t *testing.T) {
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
	target := strings.TrimPrefix(s.URL, "http://")
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: vramguard
    static_configs:
      - targets: [%q]
`, mustAbs(t, "../deploy/prometheus/rules.yml"), target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	prom := exec.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	var logb bytes.Buffer
	prom.Stdout, prom.Stderr = &logb, &logb
	prom.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := prom.Start(); err != nil {
		t.Fatalf("start prometheus (Debian package prometheus): %v", err)
	}
	t.Cleanup(func() { prom.Process.Signal(syscall.SIGTERM); prom.Wait() })

	q := url.Values{"query": {`vramguard_job_gpu_memory_bytes{kind="notebook"}`}}
	api := fmt.Sprintf("http://127.0.0.1:%d/api/v1/query?%s", port, q.Encode())
	var got string
	deadline := time.Now().Add(40 * time.Second)
	for {
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Metric map[string]string
					Value  []any
				}
			}
		}
		resp, err := http.Get(api)
		if err == nil {
			_ = jsonDecode(resp.Body, &r)
			resp.Body.Close()
			if len(r.Data.Result) == 1 {
				m := r.Data.Result[0].Metric
				if m["job"] != "vramguard" || m["job_name"] != "kernel 7c1e0f52" || m["notebook"] != "7c1e0f52-9d1b-4c47-a1f3-5b0b8a6e2d11" {
					t.Fatalf("series labels %v", m)
				}
				got, _ = r.Data.Result[0].Value[1].(string)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus never returned the series (last err %v)\n%s", err, tail(logb.String(), 2000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got != "9663676416" {
		t.Fatalf("notebook GPU memory through Prometheus = %s, want 9663676416 (9 GiB)", got)
	}
}

// TestPrometheusRules checks deploy/prometheus/rules.yml with promtool and
// runs its unit tests, and that every alert rule has a test.
func TestPrometheusRules(t *testing.T) {
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
