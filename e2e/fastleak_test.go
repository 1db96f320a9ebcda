package e2e

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// leakScript keeps a 1.67 MiB tensor every half second (about 3.3 MiB/s of
// host memory) until the kernel kills it.
const leakScript = `
import time, torch
keep = []
while True:
    keep.append(torch.ones(436907))
    time.sleep(0.5)
`

// TestFastLeakForecast (issue #26): a CPU job that would reach its
// --memory-limit about two minutes after it starts is forecast to run out
// of memory, with the rate and the ETA, at least a third of that time
// before the kill; the ETA agrees with the limit and the rate computed
// from the recorded samples; no leak is claimed (a different claim, with
// different evidence), and `analyze RUN` shows the same forecast. The test
// stops the job once the forecast is in.
func TestFastLeakForecast(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, errb := e.background("run", "--name", "fastleak", "--gpu-backend", "none", "--memory-limit", "600m", "--", python, "-c", leakScript)
	var line string
	waitFor(t, 120*time.Second, "the OOM forecast", func() bool {
		for _, l := range strings.Split(errb.String(), "\n") {
			if strings.Contains(l, "out of memory in about") {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, "host memory rising") || !strings.Contains(line, "/s") || !strings.Contains(line, "not a leak verdict") {
		t.Errorf("forecast line %q: want the rate and that it is a forecast, not a leak verdict", line)
	}
	if strings.Contains(errb.String(), "memory leak") {
		t.Errorf("a leak was claimed as well:\n%s", errb.String())
	}

	r := e.run("analyze", "fastleak", "--json")
	var a struct {
		Monitor struct {
			Leak     *json.RawMessage `json:"leak"`
			Forecast *struct {
				Series    string   `json:"series"`
				Basis     string   `json:"basis"`
				SinceS    float64  `json:"leak_start_s"`
				DetectedS float64  `json:"detected_at_s"`
				OOMETA    *float64 `json:"oom_eta_s"`
				Rate      float64  `json:"leak_rate_bytes_per_s"`
				Limit     *float64 `json:"limit_bytes"`
			} `json:"oom_forecast"`
		} `json:"monitor"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		t.Fatalf("analyze --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	f := a.Monitor.Forecast
	if f == nil || f.OOMETA == nil || f.Limit == nil {
		t.Fatalf("analyze RUN shows no forecast: %s", r.stdout)
	}
	if f.Series != "rss" || f.Basis != "runway" || a.Monitor.Leak != nil {
		t.Errorf("forecast on %q from %q, leak %v: want a runway forecast on rss and no leak", f.Series, f.Basis, a.Monitor.Leak)
	}

	// The independent measure: the recorded samples' own rate over the rise
	// the forecast rests on (from its start to the forecast: a loaded
	// machine slows the job's steps, so another stretch has another rate),
	// and the cgroup's limit.
	x := e.run("runs", "export", "fastleak", "-o", "-")
	lines := strings.Split(strings.TrimSpace(x.stdout), "\n")
	if x.code != 0 || len(lines) < 40 {
		t.Fatalf("runs export: exit %d, %d lines\n%s", x.code, len(lines), x.stderr)
	}
	var ts, rss, cg []float64
	limit := 0.0
	for _, row := range lines[1:] {
		c := cells(lines[0], row)
		tt, _ := strconv.ParseFloat(c["t"], 64)
		if tt > f.DetectedS || tt < f.SinceS {
			continue
		}
		r, _ := strconv.ParseFloat(c["rss"], 64)
		u, _ := strconv.ParseFloat(c["cgroup_usage"], 64)
		limit, _ = strconv.ParseFloat(c["limit"], 64)
		ts, rss, cg = append(ts, tt), append(rss, r), append(cg, u)
	}
	if f.DetectedS-f.SinceS < 40 || len(ts) < 20 {
		t.Fatalf("the forecast rests on the rise from t=%.0fs to t=%.0fs, %d samples: want the runway's 40 s at least", f.SinceS, f.DetectedS, len(ts))
	}
	if limit != 600<<20 || *f.Limit != limit {
		t.Fatalf("limit %v in the samples, %v in the forecast: want 600 MiB", limit, *f.Limit)
	}
	rate, at := theilSen(ts, rss)
	if math.Abs(f.Rate-rate) > 0.15*rate {
		t.Errorf("forecast rate %.0f B/s, the samples' %.0f B/s\n%s", f.Rate, rate, x.stdout)
	}
	left := (limit - at(f.DetectedS)) / rate
	if math.Abs(*f.OOMETA-left) > 0.25*left+5 {
		t.Errorf("forecast ETA %.0fs at t=%.0fs; the samples reach the limit %.0fs later", *f.OOMETA, f.DetectedS, left)
	}
	// The kernel kills on the cgroup's usage (RSS counts shared library
	// pages charged elsewhere): the kill lies later still.
	cgRate, cgAt := theilSen(ts, cg)
	kill := f.DetectedS + (limit-cgAt(f.DetectedS))/cgRate
	t.Logf("forecast at t=%.0fs from the rise since t=%.0fs: ETA %.0fs (samples: %.0fs), rate %.2f MiB/s (samples: %.2f MiB/s); kill at about t=%.0fs", f.DetectedS, f.SinceS, *f.OOMETA, left, f.Rate/(1<<20), rate/(1<<20), kill)
	if kill < 100 || kill-f.DetectedS < kill/3 {
		t.Errorf("forecast at t=%.0fs, the kill at about t=%.0fs: want at least a third of the job's life ahead", f.DetectedS, kill)
	}
}

// theilSen is the line through (x, y) whose slope is the median of the
// slopes between every two points, and whose intercept the median of what
// is left: a line through the job's steady rise that the interpreter's
// start (a jump of a few hundred MiB in its first seconds) does not tilt.
func theilSen(x, y []float64) (float64, func(float64) float64) {
	var slopes []float64
	for i := range x {
		for j := i + 1; j < len(x); j++ {
			if x[j] != x[i] {
				slopes = append(slopes, (y[j]-y[i])/(x[j]-x[i]))
			}
		}
	}
	slope := median(slopes)
	rest := make([]float64, len(x))
	for i := range x {
		rest[i] = y[i] - slope*x[i]
	}
	icpt := median(rest)
	return slope, func(v float64) float64 { return icpt + slope*v }
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}
