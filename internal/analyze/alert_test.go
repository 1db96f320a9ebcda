package analyze

import (
	"math"
	"testing"
)

func TestAlerterHysteresis(t *testing.T) {
	nan := math.NaN()
	type step struct {
		t    float64
		leak bool
		eta  float64
		want []AlertKind
	}
	steps := []step{
		{0, false, nan, nil},
		{60, false, 900, nil},
		{120, false, 590, []AlertKind{AlertOOM}},
		{180, false, 610, nil}, // wobbles above the threshold: same episode
		{240, false, 580, nil},
		{300, true, 570, []AlertKind{AlertLeak}},
		{360, true, 1500, nil}, // clearly off, but not for long enough
		{400, true, 500, nil},
		{460, true, 1500, nil},
		{800, true, 1500, nil}, // off for 340 s: the OOM episode ends
		{860, true, 400, []AlertKind{AlertOOM}},
	}
	a := NewAlerter(AlerterConfig{})
	for _, s := range steps {
		r := Report{LastT: s.t, OOMETA: s.eta, OOMETALow: s.eta, OOMETAHigh: s.eta, Verdict: VerdictStable, LeakRate: nan}
		if s.leak {
			r.Verdict, r.LeakRate, r.LeakStartT = VerdictLeak, mib, 10
		}
		got := a.Observe(r)
		if len(got) != len(s.want) {
			t.Fatalf("t=%v: got %d alerts %+v, want %v", s.t, len(got), got, s.want)
		}
		for i := range got {
			if got[i].Kind != s.want[i] || got[i].Message == "" {
				t.Fatalf("t=%v: alert %d = %+v, want kind %s", s.t, i, got[i], s.want[i])
			}
		}
	}
}
