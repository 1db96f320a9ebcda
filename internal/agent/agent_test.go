package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// twoJobs: a steady trainer on GPU 0 and a short eval job that ends at 3 s.
const twoJobs = `{
  "name": "two-jobs", "duration": "1h",
  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "16GiB", "util": 50}],
  "processes": [
    {"pid": 960001, "device": 0, "memory": "5GiB", "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"], "rss": "2GiB"}},
    {"pid": 960002, "device": 0, "end": "3s", "memory": "1GiB", "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "eval.py"], "rss": "1GiB"}}
  ]}`

func TestTokenGuardsMutationsBeforeRouting(t *testing.T) {
	r := newRig(t, twoJobs, Config{})
	r.step(1)
	note := `{"message": "deployed v2"}`
	tests := []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"read needs no token", "GET", "/api/v1/jobs", "", "", 200},
		{"post without token", "POST", "/api/v1/events", "", note, 401},
		{"post with a wrong token", "POST", "/api/v1/events", "wrong", note, 401},
		{"post to no route without token is 401, not 404", "POST", "/api/v1/no/such/thing", "", "", 401},
		{"delete without token", "DELETE", "/api/v1/jobs/x", "", "", 401},
		{"kill without token", "POST", "/api/v1/jobs/pid:960001:0/kill", "", "", 401},
		{"stop without token", "POST", "/api/v1/runs/abc/stop", "", "", 401},
		{"restart without token", "POST", "/api/v1/runs/abc/restart", "", "", 401},
		{"restart with a wrong token", "POST", "/api/v1/runs/abc/restart", "wrong", "", 401},
		{"restart by GET is no route", "GET", "/api/v1/runs/abc/restart", "", "", 404},
		{"post with the token", "POST", "/api/v1/events", "s3cret", note, 201},
		{"post to no route with the token", "POST", "/api/v1/no/such/thing", "s3cret", "", 404},
		{"simulated pids are never signalled", "POST", "/api/v1/jobs/" + r.ag.Snapshot().Jobs[0].Key + "/kill", "s3cret", "", 409},
		{"bad range", "GET", "/api/v1/timelines?range=yesterday", "", "", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := r.do(tc.method, tc.path, tc.token, tc.body)
			if code != tc.want {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, code, body, tc.want)
			}
		})
	}
	// An agent without a token refuses every mutation.
	open := httptest.NewServer(r.ag.Handler(""))
	defer open.Close()
	resp, err := http.Post(open.URL+"/api/v1/events", "application/json", strings.NewReader(note))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("tokenless agent accepted a mutation: %d", resp.StatusCode)
	}
}

func TestCheckListen(t *testing.T) {
	tests := []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:9345", "", true},
		{"[::1]:9345", "", true},
		{"localhost:9345", "", true},
		{"0.0.0.0:9345", "", false},
		{":9345", "", false},
		{"10.1.2.3:9345", "", false},
		{"gpu-node-7:9345", "", false},
		{"0.0.0.0:9345", "tok", true},
		{"nonsense", "", false},
	}
	for _, tc := range tests {
		err := CheckListen(tc.addr, tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %q) = %v, want ok=%v", tc.addr, tc.token, err, tc.ok)
		}
	}
}

func TestJobsEventsAndVanishingSeries(t *testing.T) {
	r := newRig(t, twoJobs, Config{})
	r.step(2)
	_, m := r.do("GET", "/metrics", "", "")
	for _, want := range []string{
		`vramguard_job_gpu_memory_bytes{container="",gpu="0",job_name="python3 eval.py",kind="process",namespace="",notebook="",pod="",user="root",uuid="GPU-test-0"} 1.073741824e+09`,
		`vramguard_job_gpu_memory_bytes{container="",gpu="0",job_name="python3 train.py",kind="process",namespace="",notebook="",pod="",user="root",uuid="GPU-test-0"} 5.36870912e+09`,
		`vramguard_device_memory_total_bytes{gpu="0",name="Test GPU",uuid="GPU-test-0"} 1.7179869184e+10`,
		`root_pid="960001"`,
		`vramguard_collector_success{collector="sampler"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, l := range strings.Split(m, "\n") {
		if strings.Contains(l, `pid="`) && !strings.HasPrefix(l, "vramguard_job_info{") && !strings.HasPrefix(l, "#") {
			t.Errorf("a PID label outside job_info: %s", l)
		}
	}
	r.step(3) // eval.py ends at 3 s
	_, m = r.do("GET", "/metrics", "", "")
	if strings.Contains(m, `job_name="python3 eval.py"`) {
		t.Errorf("series of an ended job still exported:\n%s", grepLines(m, "eval.py"))
	}
	if !strings.Contains(m, `job_name="python3 train.py"`) {
		t.Error("series of the running job missing")
	}
	_, body := r.do("GET", "/api/v1/events", "", "")
	var evs struct{ Events []store.AgentEvent }
	if err := json.Unmarshal([]byte(body), &evs); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs.Events {
		kinds = append(kinds, e.Kind+":"+e.JobName)
	}
	got := strings.Join(kinds, " ")
	for _, want := range []string{"start:python3 train.py", "start:python3 eval.py", "exit:python3 eval.py"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %q lack %q", got, want)
		}
	}
	// The ended job's timeline is still served, from the store.
	_, body = r.do("GET", "/api/v1/timelines?range=1h", "", "")
	var tls struct{ Timelines []Timeline }
	if err := json.Unmarshal([]byte(body), &tls); err != nil {
		t.Fatal(err)
	}
	byName := map[string]Timeline{}
	for _, tl := range tls.Timelines {
		byName[tl.Name] = tl
	}
	ev, tr := byName["python3 eval.py"], byName["python3 train.py"]
	if len(ev.T) != 3 || ev.GPU[0] != 1<<30 || ev.Live {
		t.Errorf("eval timeline: %d points, live %v, %v", len(ev.T), ev.Live, ev.GPU)
	}
	if len(tr.T) != 5 || tr.GPU[4] != 5<<30 || tr.Limit != 16<<30 || tr.Alloc[0] != nil {
		t.Errorf("train timeline: %d points %v limit %d", len(tr.T), tr.GPU, tr.Limit)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPromtoolCheckMetrics runs Debian's promtool (package prometheus) over
// a scrape of an agent with several kinds of job.
func TestPromtoolCheckMetrics(t *testing.T) {
	testbin.Need(t, testbin.Prometheus)
	r := newRig(t, twoJobs, Config{})
	r.step(2)
	code, m := r.do("GET", "/metrics", "", "")
	if code != 200 {
		t.Fatal(code)
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(m)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// leaky grows 8 GiB -> 70 GiB over ten minutes on an 80 GiB GPU.
const leaky = `{
  "name": "leaky", "duration": "20m",
  "devices": [{"name": "Test GPU", "total": "80GiB"}],
  "processes": [
    {"pid": 961001, "device": 0, "memory": [["0s", "8GiB"], ["10m", "70GiB"]],
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "train_leaky.py"], "rss": "3GiB"}}
  ]}`

func TestLeakAlertReachesWebhook(t *testing.T) {
	var mu sync.Mutex
	var got []Alert
	var calls atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first delivery fails, so the retry path is part of the test.
		if calls.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		var a Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
	}))
	defer hook.Close()
	r := newRig(t, leaky, Config{Alerts: AlertConfig{Webhook: hook.URL, Backoff: time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.ag.Alerts().Run(ctx); close(done) }()
	r.step(540)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := r.ag.Alerts().Stats()
		if st.Queued == 0 && st.Delivered+st.Dropped >= uint64(sumRaised(st)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // polling the worker's counters, bounded by the deadline
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	kinds := map[string]bool{}
	for _, a := range got {
		kinds[a.Kind] = true
		if a.Job != "python3 train_leaky.py" || a.Message == "" || a.EventID == 0 {
			t.Errorf("alert %+v", a)
		}
	}
	if !kinds[EventLeak] && !kinds[EventOOMForecast] {
		t.Fatalf("no leak or OOM-forecast alert delivered; got %+v (stats %+v)", got, r.ag.Alerts().Stats())
	}
	if st := r.ag.Alerts().Stats(); st.Failed < 1 {
		t.Fatalf("the failed first POST was not counted: %+v", st)
	}
	_, m := r.do("GET", "/metrics", "", "")
	if !strings.Contains(m, `vramguard_job_oom_eta_seconds{`) && !strings.Contains(m, `vramguard_job_leak_detected{container="",job_name="python3 train_leaky.py",kind="process",namespace="",notebook="",pod="",user="root"} 1`) {
		t.Errorf("neither an OOM ETA nor a leak on /metrics:\n%s", grepLines(m, "train_leaky"))
	}
}

func sumRaised(s AlertStats) int {
	n := 0
	for _, v := range s.Raised {
		n += int(v)
	}
	return n
}

func TestWebhookQueueIsBounded(t *testing.T) {
	release := make(chan struct{})
	var delivered atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		delivered.Add(1)
	}))
	defer hook.Close()
	al := NewAlerts(AlertConfig{Webhook: hook.URL, QueueSize: 3, Backoff: time.Millisecond}, discardLog(), time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { al.Run(ctx); close(done) }()
	al.Raise(&store.AgentEvent{ID: 1, Kind: EventDied, Message: "m"})
	// Wait until the worker holds the first alert (queue empty again).
	for al.Stats().Queued != 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 2; i <= 10; i++ {
		al.Raise(&store.AgentEvent{ID: int64(i), Kind: EventDied, Message: "m"})
	}
	st := al.Stats()
	if st.Queued != 3 || st.Dropped != 6 {
		t.Fatalf("queue %d dropped %d, want 3 and 6", st.Queued, st.Dropped)
	}
	close(release)
	for al.Stats().Delivered < 4 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if d := delivered.Load(); d != 4 {
		t.Fatalf("delivered %d, want 4 (the one in flight and the 3 queued)", d)
	}
}
