package agent

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/usage"
)

// Report accounts for the jobs seen in [from, to] (see package usage),
// grouped by by; jobs not kept says which to leave out (nil: none).
func (a *Agent) Report(ctx context.Context, by string, from, to time.Time, keep func(JobView) bool) (usage.Report, error) {
	if err := a.tl.Flush(ctx); err != nil {
		return usage.Report{}, err
	}
	jobs, err := a.jobsIn(ctx, from)
	if err != nil {
		return usage.Report{}, err
	}
	evs, err := a.cfg.Store.AgentEvents(ctx, store.AgentEventFilter{Since: from})
	if err != nil {
		return usage.Report{}, err
	}
	died := map[string][]string{}
	for _, e := range evs {
		if e.Kind == EventDied && !e.T.After(to) {
			died[e.JobKey] = append(died[e.JobKey], e.Message)
		}
	}
	interval, _ := a.cfg.Sampler.Intervals()
	var in []usage.Job
	for _, j := range jobs {
		if j.id == 0 || (keep != nil && !keep(j)) {
			continue
		}
		fine, coarse, err := a.tl.Samples(ctx, j.id, from, to)
		if err != nil {
			return usage.Report{}, err
		}
		uj := usage.Job{Key: j.Key, Name: j.Labels.Job, User: j.User, Devices: j.Devices, Died: died[j.Key],
			Series: []usage.Series{{Step: a.tl.Retention().CoarseStep, Points: coarse}, {Step: interval, Points: fine}}}
		if uj.Name == "" {
			uj.Name = j.Name
		}
		in = append(in, uj)
	}
	return usage.Compute(in, by, a.cfg.Idle.withDefaults().Threshold, from, to), nil
}

// apiReport answers ?by=user|job|gpu&range=168h (or from=&to=): the
// accounting of the range; over the socket a user's own jobs only.
func (a *Agent) apiReport(w http.ResponseWriter, r *http.Request) {
	if group := r.URL.Query().Get("group"); group != "" {
		a.apiGroupReport(w, r, group)
		return
	}
	by := r.URL.Query().Get("by")
	if by == "" {
		by = usage.ByUser
	}
	if !slices.Contains(usage.Bys, by) {
		writeErr(w, http.StatusBadRequest, "by %q: want user, job or gpu", by)
		return
	}
	a.answerReport(w, r, func(from, to time.Time, owns func(uid int) bool) (any, error) {
		var keep func(JobView) bool
		if owns != nil {
			keep = func(j JobView) bool { return owns(j.UID) }
		}
		return a.Report(r.Context(), by, from, to, keep)
	})
}

// apiGroupReport answers ?group=GROUP&range=168h (or from=&to=): a
// distributed job's efficiency on this node; over the socket only the
// caller's own jobs count.
func (a *Agent) apiGroupReport(w http.ResponseWriter, r *http.Request, group string) {
	a.answerReport(w, r, func(from, to time.Time, owns func(uid int) bool) (any, error) {
		return a.GroupReport(r.Context(), group, from, to, owns)
	})
}

// answerReport answers with the report build makes of the range the
// request asks for (range=, or from= and to=) and of the jobs owns keeps
// by their owner's UID: over the socket the caller's own, else (nil) all.
func (a *Agent) answerReport(w http.ResponseWriter, r *http.Request, build func(from, to time.Time, owns func(uid int) bool) (any, error)) {
	from, to, err := a.parseRange(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	var owns func(uid int) bool
	if c, lim := limited(r); lim {
		owns = c.owns
	}
	rep, err := build(from, to, owns)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}
