package agent

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
)

// TestJudgingEstimate: while a job's verdict is insufficient_data the API
// says how long the detector still needs, and the sampler's own monitor
// reaches a verdict when it said (give or take a sample).
func TestJudgingEstimate(t *testing.T) {
	r := newRig(t, twoJobs, Config{})
	train := func() JobView {
		_, body := r.do("GET", "/api/v1/jobs", "", "")
		var jobs struct{ Jobs []JobView }
		if err := json.Unmarshal([]byte(body), &jobs); err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs.Jobs {
			if j.Name == "python3 train.py" {
				return j
			}
		}
		t.Fatalf("no train.py in %s", body)
		return JobView{}
	}
	r.step(1)
	j := train()
	if j.Verdict != string(analyze.VerdictInsufficientData) || j.JudgingS == nil {
		t.Fatalf("after one sample: verdict %q, judging_s %v", j.Verdict, j.JudgingS)
	}
	first := *j.JudgingS
	r.step(60)
	if j := train(); j.JudgingS == nil || math.Abs(*j.JudgingS-(first-60)) > 0.5 {
		t.Fatalf("60 s later judging_s = %v, want %v", j.JudgingS, first-60)
	}
	took := 60
	for ; took < 2000; took++ {
		if train().Verdict != string(analyze.VerdictInsufficientData) {
			break
		}
		r.step(1)
	}
	if j := train(); j.JudgingS != nil {
		t.Errorf("judged (%s) and still judging_s %v", j.Verdict, *j.JudgingS)
	}
	t.Logf("estimated %.0f s after the first sample; judged %d samples later", first, took)
	if math.Abs(float64(took)-first) > 1 {
		t.Fatalf("the detector judged after %d more samples; the estimate said %.0f s", took, first)
	}
}

func TestJudgingLeftAtOtherIntervals(t *testing.T) {
	cfg := analyze.DefaultConfig()
	// 1 s: windows of 31 samples (30 s); 5 s: of 8 samples (35 s)
	for _, tc := range []struct {
		n        int
		interval time.Duration
		want     time.Duration
	}{
		{0, time.Second, time.Duration(cfg.MinLevels*31) * time.Second},
		{100, time.Second, time.Duration(cfg.MinLevels*31-100) * time.Second},
		{0, 5 * time.Second, time.Duration(cfg.MinLevels*8*5) * time.Second},
		{10000, time.Second, 0},
	} {
		if got := judgingLeft(cfg, tc.n, tc.interval); got != tc.want {
			t.Errorf("judgingLeft(%d, %s) = %s, want %s", tc.n, tc.interval, got, tc.want)
		}
	}
}
