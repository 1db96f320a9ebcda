package supervise

import (
	"context"
	"fmt"
	"strings"

	"github.com/vramguard/vramguard/internal/adapt"
	"github.com/vramguard/vramguard/internal/timeline"
)

// adaptSettings puts the attempt's settings into its command (placeholders)
// and environment, and into its post-mortem.
func (s *supervisor) adaptSettings(pm *Postmortem, argv, env []string) []string {
	cur := s.settings
	pm.Settings = &cur
	pm.Adaptations = append([]adapt.Step(nil), s.steps...)
	ph := cur.Placeholders()
	for i := range argv {
		for k, v := range ph {
			argv[i] = strings.ReplaceAll(argv[i], k, v)
		}
	}
	base, _ := lookupEnv(env, "PYTORCH_CUDA_ALLOC_CONF")
	for k, v := range cur.Env(base) {
		env = setEnv(env, k, v)
	}
	return env
}

// adaptAfter reads the ended attempt: it says in the post-mortem when the
// last change had no effect, and returns the policy's decision for the
// next attempt.
func (s *supervisor) adaptAfter(pm *Postmortem) *adapt.Decision {
	e := adapt.Ended{Attempt: pm.Attempt, Verdict: pm.Verdict, Processes: pm.Memory.PeakProcs}
	if pm.Probe != nil {
		e.Torch = pm.Probe.TorchVersion
	}
	if s.prev != nil && len(s.steps) > 0 && s.steps[len(s.steps)-1].Attempt == pm.Attempt {
		if msg := adapt.NoEffect(*s.prev, e, &s.steps[len(s.steps)-1]); msg != "" {
			pm.Evidence = append(pm.Evidence, msg)
			pm.Advice = append(pm.Advice, "make the command use the placeholders vramguard substitutes ({batch}, {accum}, {workers}) or read $VRAMGUARD_BATCH, $VRAMGUARD_ACCUM, $VRAMGUARD_WORKERS; see docs/ADAPT.md")
		}
	}
	s.prev = &e
	d := s.o.Adapt.Policy.Decide(s.settings, e)
	if d.Step == nil && d.Note == "" && len(s.steps) > 0 && pm.Reason != "success" {
		d.Note = fmt.Sprintf("kept the settings (%s): %s is not a reason --adapt changes them for", s.settings, pm.Reason)
	}
	return &d
}

// applyAdaptation makes the decided change for the attempt after n, and
// says so.
func (s *supervisor) applyAdaptation(ctx context.Context, n int, d *adapt.Decision) {
	s.settings = d.Next
	s.steps = append(s.steps, *d.Step)
	msg := d.Step.String()
	s.notifyf("adapting: %s (%s)", msg, d.Step.Why)
	s.event(ctx, n, timeline.KindAdapt, msg+" ("+d.Step.Why+")", d.Step)
}
