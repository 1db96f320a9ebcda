package postmortem

import (
	"strings"
	"testing"
	"time"
)

// TestWarningSaves: a save made on a warning is a line of evidence and a
// line under the probe's checkpoints, with its step and its delay; a save
// that failed or was not made on a warning is neither.
func TestWarningSaves(t *testing.T) {
	w := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cks := []Checkpoint{
		{Path: "/c/a-0.pt", T: w.Add(-time.Minute), Steps: 0, Autosave: true},
		{Path: "/c/a-21.pt", T: w.Add(2500 * time.Millisecond), Steps: 21, Autosave: true, Signal: "SIGUSR1", WarnedAt: &w},
		{Path: "/c/a-22.pt", T: w.Add(3 * time.Second), Steps: 22, Autosave: true, Signal: "SIGTERM", WarnedAt: &w, Error: "OSError: full"},
	}
	pm := &Postmortem{Probe: &Probe{Checkpoints: cks}, EndedAt: w.Add(30 * time.Second)}
	WarningSaves(pm)
	want := []string{"/c/a-21.pt was saved at step 21, 2.5s after the warning (SIGUSR1) and 27.5s before the job ended"}
	if strings.Join(pm.Evidence, "\n") != strings.Join(want, "\n") {
		t.Errorf("evidence %q, want %q", pm.Evidence, want)
	}
	for i, want := range []string{"", "saved at step 21, 2.5s after the warning (SIGUSR1)", ""} {
		if got := cks[i].AfterWarning(time.Time{}); got != want {
			t.Errorf("%s: %q, want %q", cks[i].Path, got, want)
		}
	}
}
