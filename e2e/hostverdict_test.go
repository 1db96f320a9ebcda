package e2e

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/units"
)

// TestAnalyzeShortHostLeak: a CPU job (no GPU backend) that keeps every
// step's tensor rises linearly until its --memory-limit cgroup kills it,
// some 7 minutes into the run (on a clock 10 times the wall clock's:
// fastRun). That is shorter than the leak test needs of a series (10 windows
// of 30 s after a 60 s warm-up, and a rise seen in each third), so `analyze`
// may not call it a leak yet; but it judges the series the job has, its
// host memory: a leak on rss, or what that series lacks, in its own terms,
// with the rise and the limit it was heading for. Never the count of GPU
// windows of a job without a GPU. The monitor's own forecast, raised while
// the job ran, is the independent measure: analyze's forecast from the
// same samples names the same series and a limit the job did reach.
func TestAnalyzeShortHostLeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stop := t.TempDir() + "/stop"
	t.Cleanup(func() { os.WriteFile(stop, nil, 0o644) })
	script := stopFile(stop) + `
import time, torch
history = []
while not stopped():
    history.append(torch.randn(1 << 20))
    time.sleep(0.3)
`
	run := e.runFast(10, "--name", "shortleak", "--gpu-backend", "none", "--memory-limit", "600m", "--", python, "-c", script)
	if code := run.wait(5 * time.Minute); code != 137 {
		t.Fatalf("leaking job: exit %d, want 137 (killed)\n%s", code, run.errb)
	}
	d := e.explainDoc("last")
	if d.Reason != "host_oom_killed" {
		t.Fatalf("reason %q, want host_oom_killed", d.Reason)
	}
	dur := time.Duration(e.explain("last")["duration_s"].(float64) * float64(time.Second))
	// some 7 minutes on a quiet machine; a loaded one slows each step, and
	// the job runs longer on its clock (13 minutes at a load average of 20)
	if dur < 4*time.Minute || dur > 30*time.Minute {
		t.Fatalf("the job ran %v of its clock, want some 7 minutes (at most 30 under load)", dur)
	}
	if d.Monitor == nil || d.Monitor.Forecast == nil || d.Monitor.Forecast.Series != "rss" {
		t.Fatalf("the monitor raised no host forecast while the job ran: %+v", d.Monitor)
	}

	r := e.run("analyze", "last", "--json")
	var a struct {
		Verdict  string   `json:"verdict"`
		Series   string   `json:"series"`
		Samples  int      `json:"samples"`
		Evidence []string `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		t.Fatalf("analyze --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	ev := strings.Join(a.Evidence, "\n")
	t.Logf("analyze: %s on %s over %d samples\n%s", a.Verdict, a.Series, a.Samples, ev)
	if a.Series != "rss" {
		t.Errorf("analyze judged series %q, want rss (the job's only series)", a.Series)
	}
	if strings.Contains(ev, "have 0") || !(a.Verdict == "leak" || a.Verdict == "insufficient_data") {
		t.Errorf("verdict %s: %s", a.Verdict, ev)
	}
	if a.Verdict == "insufficient_data" && !strings.Contains(ev, "host") {
		t.Errorf("insufficient data not said in host terms: %s", ev)
	}
	// against the monitor's own forecast, raised live: the rise analyze
	// reads from the stored samples is the one the monitor forecast from
	var f struct {
		Series     string    `json:"series"`
		DetectedAt time.Time `json:"detected_at"`
		LeakRate   float64   `json:"leak_rate_bytes_per_s"`
		Limit      *float64  `json:"limit_bytes"`
	}
	if b, err := json.Marshal(e.explain("last")["monitor"].(map[string]any)["oom_forecast"]); err != nil || json.Unmarshal(b, &f) != nil {
		t.Fatalf("monitor's forecast: %v", err)
	}
	if f.Series != "rss" || f.Limit == nil || *f.Limit != 600<<20 || f.LeakRate <= 0 || f.DetectedAt.After(d.EndedAt) {
		t.Errorf("monitor's forecast %+v: want the rss rise to the 600 MiB limit, raised before the end", f)
	}
	// the rate is written in whichever unit suits it (KiB/s when the
	// machine's load slows the job's steps)
	m := regexp.MustCompile(`host resident memory \(rss\) floor rises ([0-9.]+ [KMG]iB)/s`).FindStringSubmatch(ev)
	if a.Verdict == "insufficient_data" {
		if m == nil {
			t.Fatalf("analyze states no rate of the rise: %s", ev)
		}
		b, err := units.ParseBytes(m[1])
		if err != nil {
			t.Fatalf("analyze's rate %q: %v", m[1], err)
		}
		rate, mon := float64(b)/(1<<20), f.LeakRate/(1<<20)
		if rate < 0.7*mon || rate > 1.3*mon {
			t.Errorf("analyze reads a rise of %.2f MiB/s, the monitor forecast from %.2f MiB/s", rate, mon)
		}
	}
}
