package postmortem

import (
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/vramguard/vramguard/internal/ckpt"
	"github.com/vramguard/vramguard/internal/diagnose"
)

// Lost is what an attempt the scheduler ended lost: how long before the end
// its newest verified checkpoint was written, and the training since.
type Lost struct {
	// Checkpoint is the newest checkpoint the probe saw written whole
	// (torch.save returned, or an atomic save was renamed into place) that
	// is still on disk at the size written and whose structure reads whole
	// (ckpt.Verify); "" when there was none.
	Checkpoint string `json:"checkpoint"`
	// CheckpointAt is when it was written; AgeS how long before the end.
	CheckpointAt *time.Time `json:"checkpoint_at,omitempty"`
	AgeS         float64    `json:"age_s"`
	// Steps is the optimizer steps made after it (all of the attempt's
	// when there was none); null without the probe.
	Steps *int64 `json:"optimizer_steps"`
	// SaveS is the longest a save took in this attempt, as measured by the
	// probe around torch.save; 0 when none was seen.
	SaveS float64 `json:"save_s"`
	// SignalLeadS is the N of the `--signal=B:USR1@N` advised: the time
	// one more step and a save take, with margin.
	SignalLeadS int `json:"signal_lead_s,omitempty"`
}

// SchedulerEnd adds to the post-mortem of an attempt its scheduler ended
// (time_limit, preempted, cancelled, node_failure) what was lost and what to
// set, from the attempt's own numbers: the newest checkpoint the probe saw
// written and verified on disk, how long before the end, the steps made
// since, and the warning lead that fits the measured save time. It reports
// whether pm is such an end. Call it once the probe's summary is in pm.Probe.
func SchedulerEnd(pm *Postmortem) bool {
	if !slices.Contains(diagnose.SchedulerReasons, pm.Reason) {
		return false
	}
	l := &Lost{}
	var newest *Checkpoint
	if p := pm.Probe; p != nil {
		for i := range p.Checkpoints {
			c := &p.Checkpoints[i]
			if c.Error != "" {
				continue
			}
			l.SaveS = math.Max(l.SaveS, c.Seconds)
			if fi, err := os.Stat(c.Path); err != nil || (c.Bytes > 0 && fi.Size() != c.Bytes) {
				continue // gone or rewritten since: not one to resume from
			}
			if rep, err := ckpt.Verify(c.Path, false); err != nil || !rep.Valid {
				continue // its structure does not read whole
			}
			if newest == nil || c.T.After(newest.T) {
				newest = c
			}
		}
	}
	end := pm.EndedAt
	switch {
	case newest != nil:
		t := newest.T
		l.Checkpoint, l.CheckpointAt, l.AgeS = newest.Path, &t, math.Max(0, end.Sub(t).Seconds())
		if pm.Probe != nil {
			n := max(0, pm.Probe.OptimizerSteps-newest.Steps)
			l.Steps = &n
		}
		s := fmt.Sprintf("the newest verified checkpoint, %s, was written %s before the end", newest.Path, FormatSeconds(l.AgeS))
		if l.Steps != nil {
			s += fmt.Sprintf(": %d optimizer steps since were lost", *l.Steps)
		}
		pm.Evidence = append(pm.Evidence, s)
	case pm.Probe != nil:
		n := pm.Probe.OptimizerSteps
		l.Steps, l.AgeS = &n, pm.DurationS
		pm.Evidence = append(pm.Evidence, fmt.Sprintf("no checkpoint was written in this attempt: all of its %s (%d optimizer steps) were lost", FormatSeconds(pm.DurationS), n))
	default:
		l.AgeS = pm.DurationS
		pm.Evidence = append(pm.Evidence, "no checkpoint was seen (the job ran without the probe): what was lost is not known")
	}
	// the warning's lead: a step to finish, then a save, with a margin
	// and at least Slurm's resolution of 60 s
	step := 0.0
	if p := pm.Probe; p != nil && p.OptimizerSteps > 0 && pm.DurationS > 0 {
		step = pm.DurationS / float64(p.OptimizerSteps)
	}
	if pm.Reason == diagnose.TimeLimit || pm.Reason == diagnose.Preempted {
		lead := max(60, int(math.Ceil((step+2*l.SaveS+30)/10))*10)
		l.SignalLeadS = lead
		switch {
		case l.SaveS > 0:
			pm.Advice = append(pm.Advice, fmt.Sprintf("A save took up to %s here and a step about %s: `#SBATCH --signal=B:USR1@%d` leaves time to finish the step and save twice over.",
				FormatSeconds(l.SaveS), FormatSeconds(step), lead))
		default:
			pm.Advice = append(pm.Advice, fmt.Sprintf("No save was measured in this attempt; `#SBATCH --signal=B:USR1@%d` is a start (Slurm may signal up to 60 s early): raise it above the time a save takes.", lead))
		}
		if pm.Reason == diagnose.Preempted {
			pm.Advice = append(pm.Advice, fmt.Sprintf("For preemption the grace time is the partition's GraceTime (Kubernetes: terminationGracePeriodSeconds): at least %d s.", lead))
		}
	}
	if l.AgeS > 0 && (newest == nil || l.AgeS > 600) {
		cadence := math.Min(3600, math.Max(300, 10*l.SaveS))
		why := "a save's cost stays under a tenth of the time"
		if l.SaveS == 0 {
			why = "no save was measured to size it"
		}
		pm.Advice = append(pm.Advice, fmt.Sprintf("Save at least every %s (%s), so an end without warning loses at most that: `vramguard run --unsaved-warning %s` says when a run goes longer unsaved.",
			FormatSeconds(cadence), why, FormatSeconds(cadence)))
	}
	pm.Lost = l
	return true
}
