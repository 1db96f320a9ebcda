package postmortem

import (
	"fmt"
	"strings"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/units"
)

// CaughtOOM makes a success that followed a CUDA out-of-memory error the
// job caught say so. The probe sees every CUDA OOM the allocator raises (its
// out-of-memory observer), whether the job lets it end the process or
// catches it, logs "Training completed" and exits 0; the output need not
// mention it. Such an end keeps the reason success (the job's own choice,
// and no restart policy should rerun it) but is never a clean one: the
// summary says what happened, a warning carries it, the evidence gives the
// OOM's figures, and the advice says what to check. It reports whether it
// changed pm; call it once the probe's summary is in pm.Probe.
func CaughtOOM(pm *Postmortem) bool {
	if pm.Reason != diagnose.Success || pm.Probe == nil || (pm.Probe.NumOOMs == 0 && pm.Probe.OOM == nil) {
		return false
	}
	p := pm.Probe
	n := int64(0)
	if p.OOM != nil {
		n = int64(p.OOM.Count)
	}
	n = max(n, p.NumOOMs, 1)
	what := "a CUDA out-of-memory error"
	if n > 1 {
		what = fmt.Sprintf("%d CUDA out-of-memory errors", n)
	}
	pm.Summary = "the job exited 0, but " + what + " was raised in it and caught: the work it reports done may not all have been done"
	if n > 1 {
		pm.Summary = "the job exited 0, but " + what + " were raised in it and caught: the work it reports done may not all have been done"
	}
	it := "it"
	if n > 1 {
		it = "them"
	}
	pm.Warnings = append(pm.Warnings, fmt.Sprintf("%s caught by the job: the probe saw the allocator raise %s, and the job went on to exit 0", what, it))
	if o := p.OOM; o != nil {
		s := "the probe saw the first"
		if o.AllocBytes != nil {
			s += " when " + units.FormatBytes(uint64(*o.AllocBytes)) + " could not be allocated"
		}
		if o.Device != nil {
			s += fmt.Sprintf(" on GPU %d", *o.Device)
		}
		if o.FreeBytes != nil {
			s += " (" + units.FormatBytes(uint64(*o.FreeBytes)) + " free)"
		}
		s += fmt.Sprintf(", in process %d", o.PID)
		if !o.T.IsZero() && !pm.EndedAt.IsZero() && pm.EndedAt.After(o.T) {
			s += ", " + FormatSeconds(pm.EndedAt.Sub(o.T).Seconds()) + " before the job ended"
		}
		pm.Evidence = append(pm.Evidence, s)
		if o.Message != "" {
			pm.Evidence = append(pm.Evidence, "its message: "+firstLine(o.Message, 300))
		}
		if o.SummaryPath != "" {
			pm.Evidence = append(pm.Evidence, "the allocator's state at the OOM: "+o.SummaryPath)
		}
	}
	if p.OptimizerSteps > 0 {
		pm.Evidence = append(pm.Evidence, fmt.Sprintf("the job made %d optimizer steps in all", p.OptimizerSteps))
	}
	pm.Advice = append(pm.Advice,
		"Check the job's log (`vramguard logs RUN`) for what it did after the OOM: a loop that catches torch.cuda.OutOfMemoryError and goes on may have skipped batches, steps or the rest of training while still reporting success.",
		"If it is meant to retry with a smaller batch, log that it did; if not, let the OOM end the job (or re-raise it), so the run fails visibly and `--adapt` or a restart policy can act on it.")
	return true
}

func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
