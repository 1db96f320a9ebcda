package postmortem

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestCaughtOOM: a success after an OOM the probe saw is never a clean one;
// any other end, or a success without one, is left as it was.
func TestCaughtOOM(t *testing.T) {
	end := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	dev, alloc, free := 0, int64(2<<30), int64(3<<29)
	oom := &OOM{PID: 4242, T: end.Add(-95 * time.Second), Source: "observer", Device: &dev, AllocBytes: &alloc, FreeBytes: &free, Count: 1}
	tests := []struct {
		name     string
		reason   string
		probe    *Probe
		changed  bool
		evidence []string
	}{
		{"success, no probe", diagnose.Success, nil, false, nil},
		{"success, probe saw no OOM", diagnose.Success, &Probe{OptimizerSteps: 10}, false, nil},
		{"success after a caught OOM", diagnose.Success, &Probe{OptimizerSteps: 3, NumOOMs: 1, OOM: oom}, true,
			[]string{"2 GiB could not be allocated on GPU 0 (1.5 GiB free), in process 4242, 1m35s before the job ended", "3 optimizer steps"}},
		{"counted OOMs without the first's details", diagnose.Success, &Probe{NumOOMs: 4}, true, nil},
		{"an OOM that ended the job is its reason already", diagnose.CUDAOOM, &Probe{NumOOMs: 1, OOM: oom}, false, nil},
		{"a failure for another reason", diagnose.PythonException, &Probe{NumOOMs: 1, OOM: oom}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pm := &Postmortem{Verdict: diagnose.Verdict{Reason: tt.reason, Summary: "s"}, EndedAt: end, Probe: tt.probe}
			if got := CaughtOOM(pm); got != tt.changed {
				t.Fatalf("CaughtOOM = %v, want %v", got, tt.changed)
			}
			if pm.Reason != tt.reason {
				t.Errorf("reason changed to %s", pm.Reason)
			}
			if !tt.changed {
				if pm.Summary != "s" || len(pm.Warnings) != 0 || len(pm.Evidence) != 0 {
					t.Errorf("changed: %+v", pm.Verdict)
				}
				return
			}
			if len(pm.Warnings) != 1 || !strings.Contains(pm.Summary, "out-of-memory") || len(pm.Advice) == 0 {
				t.Errorf("verdict %+v", pm.Verdict)
			}
			ev := strings.Join(pm.Evidence, "\n")
			for _, w := range tt.evidence {
				if !strings.Contains(ev, w) {
					t.Errorf("evidence lacks %q:\n%s", w, ev)
				}
			}
		})
	}
}

// TestRenderShortCaughtOOM: the run's own post-mortem line of such a success
// (golden: testdata/caught-oom.golden).
func TestRenderShortCaughtOOM(t *testing.T) {
	end := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	dev, alloc := 0, int64(2<<30)
	pm := &Postmortem{Verdict: diagnose.Verdict{Reason: diagnose.Success, Summary: "the job finished successfully", Evidence: []string{"exit status 0"}},
		RunID: "r1", DurationS: 240, EndedAt: end,
		Probe: &Probe{NumOOMs: 2, OOM: &OOM{PID: 7, T: end.Add(-time.Minute), Device: &dev, AllocBytes: &alloc, Count: 2, Message: "CUDA out of memory. Tried to allocate 2.00 GiB"}}}
	CaughtOOM(pm)
	var b bytes.Buffer
	RenderShort(&b, pm)
	testbin.Golden(t, filepath.Join("testdata", "caught-oom.golden"), b.Bytes(), *update)
	if strings.Contains(b.String(), "finished successfully") {
		t.Error("a success after a caught OOM rendered as a clean one")
	}
}
