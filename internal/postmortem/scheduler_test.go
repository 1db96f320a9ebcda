package postmortem

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestSchedulerEnd: what an attempt its scheduler ended lost, from its own
// numbers (checkpoints written on disk by this test, with their sizes), and
// the lead of the warning to ask for from the measured save time.
func TestSchedulerEnd(t *testing.T) {
	dir := t.TempDir()
	// a plain pickle of {"step": N} (protocol 2), which ckpt.Verify reads whole
	pickle := []byte("\x80\x02}q\x00X\x04\x00\x00\x00stepq\x01M\x84\x03s.")
	write := func(name string, b []byte) string { return testbin.WriteFile(t, dir, name, b, 0o644) }
	size := int64(len(pickle))
	good := write("step-900.pt", pickle)
	old := write("step-600.pt", pickle)
	rewritten := write("step-1000.pt", pickle[:10])                     // the probe saw it written whole; the file is not that now
	torn := write("step-1100.pt", append(pickle[:len(pickle)-2], 0, 0)) // the size written, but no pickle that reads to its end
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Hour)
	probe := func() *Probe {
		return &Probe{OptimizerSteps: 1200, Checkpoints: []Checkpoint{
			{Path: old, Bytes: size, Seconds: 9, T: end.Add(-50 * time.Minute), Steps: 600},
			{Path: good, Bytes: size, Seconds: 14, T: end.Add(-20 * time.Minute), Steps: 900},
			{Path: rewritten, Bytes: size, Seconds: 12, T: end.Add(-5 * time.Minute), Steps: 1000},
			{Path: torn, Bytes: size, Seconds: 12, T: end.Add(-3 * time.Minute), Steps: 1100},
			{Path: filepath.Join(dir, "failed.pt"), Error: "OSError: [Errno 28]", T: end.Add(-time.Minute)},
		}}
	}
	tests := []struct {
		name     string
		reason   string
		probe    *Probe
		applies  bool
		age      float64
		steps    int64 // -1: null
		lead     int
		evidence string
		advice   []string
	}{
		{"time limit, checkpoints", diagnose.TimeLimit, probe(), true, 1200, 300,
			// a step: 7200 s / 1200 = 6 s; 6 + 2×14 + 30 = 64 → 70
			70, "the newest verified checkpoint, " + good + ", was written 20m0s before the end: 300 optimizer steps since were lost",
			[]string{"`#SBATCH --signal=B:USR1@70`", "A save took up to 14s here and a step about 6s", "Save at least every 5m0s"}},
		{"preempted, no checkpoint", diagnose.Preempted, &Probe{OptimizerSteps: 50}, true, 7200, 50,
			// a step: 7200 s / 50 = 144 s; 144 + 30 = 174 → 180
			180,
			"no checkpoint was written in this attempt: all of its 2h0m0s (50 optimizer steps) were lost",
			[]string{"`#SBATCH --signal=B:USR1@180`", "GraceTime", "no save was measured"}},
		{"cancelled, without the probe", diagnose.Cancelled, nil, true, 7200, -1, 0, "no checkpoint was seen (the job ran without the probe)", nil},
		{"node failure", diagnose.NodeFailure, probe(), true, 1200, 300, 0, "was written 20m0s before the end", []string{"Save at least every 5m0s"}},
		{"interrupted by the user", diagnose.Interrupted, probe(), false, 0, 0, 0, "", nil},
		{"success", diagnose.Success, probe(), false, 0, 0, 0, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pm := &Postmortem{Verdict: diagnose.Verdict{Reason: tt.reason}, StartedAt: start, EndedAt: end, DurationS: 7200, Probe: tt.probe}
			if got := SchedulerEnd(pm); got != tt.applies {
				t.Fatalf("SchedulerEnd = %v, want %v", got, tt.applies)
			}
			if !tt.applies {
				if pm.Lost != nil || len(pm.Evidence)+len(pm.Advice) != 0 {
					t.Errorf("changed: %+v %+v", pm.Lost, pm.Verdict)
				}
				return
			}
			l := pm.Lost
			if l == nil || l.AgeS != tt.age || l.SignalLeadS != tt.lead {
				t.Fatalf("lost %+v, want age %v lead %d", l, tt.age, tt.lead)
			}
			if (tt.steps < 0) != (l.Steps == nil) || (l.Steps != nil && *l.Steps != tt.steps) {
				t.Errorf("steps lost %v, want %d", l.Steps, tt.steps)
			}
			if ev := strings.Join(pm.Evidence, "\n"); !strings.Contains(ev, tt.evidence) {
				t.Errorf("evidence lacks %q:\n%s", tt.evidence, ev)
			}
			adv := strings.Join(pm.Advice, "\n")
			for _, a := range tt.advice {
				if !strings.Contains(adv, a) {
					t.Errorf("advice lacks %q:\n%s", a, adv)
				}
			}
		})
	}
}
