package agent

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/testbin"
)

var update = flag.Bool("update", false, "rewrite golden files")

// scrape returns the agent's own metrics (not the Go runtime's or the
// process's, which differ from run to run) in the text format.
func scrape(t *testing.T, a *Agent) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{a: a})
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("scrape: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

// durations are the only figures of a scrape measured on the wall clock.
var durations = regexp.MustCompile(`(?m)^(vramguard_collector_duration_seconds\{[^}]*\}) .*$`)

func promtoolCheck(t *testing.T, m string) {
	testbin.Need(t, testbin.Prometheus)
	t.Helper()
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(m)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestMetricsGolden scrapes an agent that has watched the workstation
// scenario (a DDP job on two GPUs, a notebook kernel with a probe that saved
// a checkpoint, a container, a service) for 70 simulated seconds and
// compares the scrape with testdata/metrics.golden (go test -run
// TestMetricsGolden -update rewrites it). Only the collectors' own
// durations are masked.
func TestMetricsGolden(t *testing.T) {
	sc, err := os.ReadFile("../../examples/scenarios/workstation.json")
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, string(sc), Config{})
	const kernel = 910101
	ctx := context.Background()
	for i := range 70 {
		r.ag.probeMessage(ctx, probe.Message{Type: probe.TypeSample, PID: kernel, PeerPID: kernel,
			CUDA: []probe.DeviceStats{{Device: 0, AllocatedBytes: 7 << 30, ReservedBytes: 8 << 30}}})
		if i == 40 {
			r.ag.probeMessage(ctx, probe.Message{Type: probe.TypeCkpt, PID: kernel, PeerPID: kernel, Path: "/home/ana/ckpt/epoch3.pt"})
		}
		r.step(1)
	}
	m := scrape(t, r.ag)
	promtoolCheck(t, m)
	got := durations.ReplaceAllString(m, "$1 DURATION")
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./internal/agent -run TestMetricsGolden -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("/metrics differs from %s (-update rewrites it):\n%s", golden, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only one of a and b has.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ia, ib := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !ib[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ia[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestJobMemoryPerGPU: a DDP job on two GPUs has one memory series per GPU,
// labelled with the GPU's index and UUID as the device series are (so they
// join with per-GPU series such as dcgm-exporter's), and they add up to the
// job's total in the API.
func TestJobMemoryPerGPU(t *testing.T) {
	sc, err := os.ReadFile("../../examples/scenarios/workstation.json")
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, string(sc), Config{})
	r.step(70)
	var ddp JobView
	for _, j := range r.ag.Snapshot().Jobs {
		if strings.Contains(j.Name, "train_ddp.py") {
			ddp = j
		}
	}
	if len(ddp.GPUs) != 2 {
		t.Fatalf("DDP job's GPUs: %+v", ddp.GPUs)
	}
	var sum uint64
	for _, g := range ddp.GPUs {
		sum += g.Bytes
	}
	if sum != ddp.GPUBytes || ddp.GPUBytes == 0 {
		t.Fatalf("per-GPU memory %+v sums to %d, the job holds %d", ddp.GPUs, sum, ddp.GPUBytes)
	}
	m := scrape(t, r.ag)
	series := regexp.MustCompile(`(?m)^vramguard_job_gpu_memory_bytes\{([^}]*)\} (\S+)$`)
	devices := regexp.MustCompile(`(?m)^vramguard_device_memory_total_bytes\{gpu="([^"]*)",name="[^"]*",uuid="([^"]*)"\}`)
	devGPU := map[string]string{}
	for _, d := range devices.FindAllStringSubmatch(m, -1) {
		devGPU[d[2]] = d[1]
	}
	label := regexp.MustCompile(`(\w+)="([^"]*)"`)
	perJob := map[string]int{}
	for _, s := range series.FindAllStringSubmatch(m, -1) {
		l := map[string]string{}
		for _, kv := range label.FindAllStringSubmatch(s[1], -1) {
			l[kv[1]] = kv[2]
		}
		if l["gpu"] == "" || l["uuid"] == "" || devGPU[l["uuid"]] != l["gpu"] {
			t.Errorf("job series without the GPU's labels as the device series carry them: %s", s[0])
		}
		perJob[l["job_name"]]++
		if l["job_name"] == ddp.Labels.Job {
			for _, g := range ddp.GPUs {
				if g.UUID == l["uuid"] && s[2] != fmt.Sprintf("%.10g", float64(g.Bytes)) && s[2] != fmt.Sprint(float64(g.Bytes)) {
					t.Errorf("%s: want %d", s[0], g.Bytes)
				}
			}
		}
	}
	if perJob[ddp.Labels.Job] != 2 || len(perJob) != 4 {
		t.Errorf("memory series per job: %v (want 2 for the DDP job, 1 for each of the other three)", perJob)
	}
}

// TestJobInfoStableAcrossWorkers: job_info is one series for the life of
// a job; DataLoader workers coming (at 5 s in the scenario) do not make a
// new one.
func TestJobInfoStableAcrossWorkers(t *testing.T) {
	sc, err := os.ReadFile("../../examples/scenarios/workstation.json")
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, string(sc), Config{})
	info := func() string { return grepLines(scrape(t, r.ag), "vramguard_job_info{") }
	r.step(2)
	before := info()
	r.step(8)
	if after := info(); after != before {
		t.Errorf("job_info changed when DataLoader workers started:\n%s", lineDiff(before, after))
	}
	if strings.Contains(before, "pids=") {
		t.Errorf("job_info carries PIDs:\n%s", before)
	}
}
