package analyze

import (
	"math"
	"strings"
	"testing"
)

// TestRetractedLeak: a rise that the online detector raises as a leak, but
// that the rest of the timeline does not bear out (the memory is handed back
// and stays flat for an hour), is reported as not a leak, with the alarm's
// time kept and said.
func TestRetractedLeak(t *testing.T) {
	sc := scenario{seed: 3, dur: 1500, dt: 1, base: 6 * gib, act: 1 * gib, probe: true, leak: 6 * mib, leakAt: 600}
	rise := sc.samples()
	flat := scenario{seed: 4, dur: 4800, dt: 1, base: 6 * gib, act: 1 * gib, probe: true}.samples()
	samples := append([]Sample(nil), rise...)
	for _, s := range flat {
		if s.T > 1500 {
			samples = append(samples, s)
		}
	}
	// the rise alone is a leak
	if r := run(DefaultConfig(), rise); r.Verdict != VerdictLeak {
		t.Fatalf("the rise alone: verdict %s, want leak (%v)", r.Verdict, r.Evidence)
	}
	r := run(DefaultConfig(), samples)
	if r.Verdict == VerdictLeak {
		t.Fatalf("rise then an hour flat: verdict leak, want it retracted (%v)", r.Evidence)
	}
	if math.IsNaN(r.DetectedAtT) || r.DetectedAtT < 600 || r.DetectedAtT > 1500 {
		t.Errorf("detected_at_t = %v, want the time the alarm was raised, inside the rise", r.DetectedAtT)
	}
	if !strings.Contains(strings.Join(r.Evidence, "\n"), "did not persist") {
		t.Errorf("evidence does not say the alarm did not persist: %v", r.Evidence)
	}
	if !math.IsNaN(r.OOMETA) {
		t.Errorf("oom_eta = %v, want none", r.OOMETA)
	}
}
