package postmortem

import (
	"testing"
	"time"
)

// TestAfterWarningFallback: a save on the warning says whether the step's
// hook or the fallback's thread made it, and why the fallback did.
func TestAfterWarningFallback(t *testing.T) {
	w := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		c    Checkpoint
		want string
	}{
		{Checkpoint{Steps: 21, T: w.Add(13 * time.Millisecond), WarnedAt: &w, Signal: "SIGUSR1"},
			"saved at step 21, 13ms after the warning (SIGUSR1) and 30s before the job ended"},
		{Checkpoint{Steps: 21, T: w.Add(2040 * time.Millisecond), WarnedAt: &w, Signal: "SIGUSR1", Fallback: true, FallbackS: 2},
			"saved by the fallback at step 21, 2s after the warning (SIGUSR1) and 28s before the job ended: no optimizer step came within 2s of the warning"},
		{Checkpoint{Steps: 7, T: w.Add(30 * time.Millisecond), WarnedAt: &w, Signal: "SIGTERM", Fallback: true},
			"saved by the fallback at step 7, 30ms after the warning (SIGTERM) and 30s before the job ended: the job was not stepping when the warning came"},
		{Checkpoint{Steps: 7, T: w, Signal: "SIGTERM", Fallback: true}, ""},
		{Checkpoint{Steps: 7, T: w, WarnedAt: &w, Error: "OSError: disk full", Fallback: true}, ""},
	}
	for _, c := range cases {
		if got := c.c.AfterWarning(w.Add(30 * time.Second)); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.c, got, c.want)
		}
	}
}
