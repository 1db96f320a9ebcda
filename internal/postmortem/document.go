package postmortem

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vramguard/vramguard/internal/adapt"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/store"
)

// Document is a run as `explain --json` and `GET /api/v1/runs/{id}` show
// it: the post-mortem of its last ended attempt (its fields at the top
// level), the run's status, every attempt, a summary of the memory
// timeline and every event.
type Document struct {
	Postmortem
	Status         string           `json:"status"`
	AttemptsDetail []AttemptSummary `json:"attempts_detail"`
	Timeline       TimelineSummary  `json:"timeline"`
	Events         []*store.Event   `json:"events"`
	// Ended is false while no attempt has ended (the post-mortem fields are
	// then empty and Summary says so).
	Ended bool `json:"ended"`
}

// AttemptSummary is one attempt of a run.
type AttemptSummary struct {
	N          int     `json:"n"`
	Reason     string  `json:"reason"`
	ExitCode   *int    `json:"exit_code"`
	DurationS  float64 `json:"duration_s"`
	ResumeFrom string  `json:"resume_from"`
	LogPath    string  `json:"log_path"`
	// Settings are what the attempt ran with under --adapt.
	Settings *adapt.Settings `json:"settings,omitempty"`
	// Kernel is a notebook kernel's cells in this attempt (the post-mortem's
	// kernel section); absent for other jobs.
	Kernel *Kernel `json:"kernel,omitempty"`
}

// TimelineSummary summarises a run's stored samples (all attempts). RSS is
// the tree's summed resident set per sample; PSS its proportional set
// (shared pages split between the processes sharing them), when read;
// Cgroup* are the job's own cgroup (--memory-limit), page cache included.
type TimelineSummary struct {
	Samples      int      `json:"samples"`
	FirstT       *float64 `json:"first_t"`
	LastT        *float64 `json:"last_t"`
	RSSFirst     uint64   `json:"rss_first_bytes"`
	RSSLast      uint64   `json:"rss_last_bytes"`
	RSSPeak      uint64   `json:"rss_peak_bytes"`
	PSSPeak      *uint64  `json:"pss_peak_bytes"`
	CgroupPeak   *uint64  `json:"cgroup_peak_bytes"`
	CgroupLimit  *uint64  `json:"cgroup_limit_bytes"`
	GPUPeak      *uint64  `json:"gpu_peak_bytes"`
	AllocPeak    *uint64  `json:"allocated_peak_bytes"`
	ReservedPeak *uint64  `json:"reserved_peak_bytes"`
	MaxProcesses int      `json:"max_processes"`
	// Sparkline draws the tree's RSS over the run, 40 cells at most.
	Sparkline string `json:"sparkline"`
}

// Build assembles the document of run r from the store; now ends the
// duration of an attempt still running.
func Build(ctx context.Context, st *store.Store, r *store.Run, now time.Time) (*Document, error) {
	doc := &Document{Status: r.Status}
	attempts, err := st.Attempts(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	raw := r.Postmortem
	if len(raw) == 0 {
		// Still running (or lost before the end): the last ended attempt.
		for i := len(attempts) - 1; i >= 0; i-- {
			if len(attempts[i].Verdict) > 0 {
				raw = attempts[i].Verdict
				break
			}
		}
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &doc.Postmortem); err != nil {
			return nil, fmt.Errorf("read post-mortem of %s: %w", r.ID, err)
		}
		doc.Ended = true
	} else {
		doc.Summary = "the run has not ended yet"
	}
	if doc.Evidence == nil {
		doc.Evidence = []string{}
	}
	if doc.Advice == nil {
		doc.Advice = []string{}
	}
	if doc.Ranks == nil {
		doc.Ranks = []ranks.Rank{}
	}
	doc.RunID, doc.Name, doc.Command, doc.Postmortem.Attempts = r.ID, r.Name, r.Command, r.Attempts
	if r.Status == store.StatusLost {
		doc.Reason = "lost"
	}
	doc.AttemptsDetail = []AttemptSummary{}
	for _, a := range attempts {
		s := AttemptSummary{N: a.N, Reason: a.Reason, ExitCode: a.ExitCode, ResumeFrom: a.ResumeFrom, LogPath: a.LogPath}
		end := now
		if a.EndedAt != nil {
			end = *a.EndedAt
		}
		s.DurationS = end.Sub(a.StartedAt).Seconds()
		if len(a.Verdict) > 0 {
			var v struct {
				Settings *adapt.Settings `json:"settings"`
				Kernel   *Kernel         `json:"kernel"`
			}
			if json.Unmarshal(a.Verdict, &v) == nil {
				s.Settings, s.Kernel = v.Settings, v.Kernel
			}
		}
		doc.AttemptsDetail = append(doc.AttemptsDetail, s)
	}
	samples, err := st.Samples(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	doc.Timeline = Summarise(samples, r.StartedAt)
	if doc.Events, err = st.Events(ctx, r.ID); err != nil {
		return nil, err
	}
	if doc.Events == nil {
		doc.Events = []*store.Event{}
	}
	return doc, nil
}

// Summarise summarises samples, with times counted from t0.
func Summarise(xs []*store.Sample, t0 time.Time) TimelineSummary {
	tl := TimelineSummary{Samples: len(xs)}
	if len(xs) == 0 {
		return tl
	}
	first, last := xs[0].T.Sub(t0).Seconds(), xs[len(xs)-1].T.Sub(t0).Seconds()
	tl.FirstT, tl.LastT = &first, &last
	tl.RSSFirst, tl.RSSLast = xs[0].RSS, xs[len(xs)-1].RSS
	peak := func(p **uint64, v *uint64) {
		if v != nil && (*p == nil || *v > **p) {
			x := *v
			*p = &x
		}
	}
	vals := make([]float64, len(xs))
	for i, x := range xs {
		vals[i] = float64(x.RSS)
		tl.RSSPeak = max(tl.RSSPeak, x.RSS)
		tl.MaxProcesses = max(tl.MaxProcesses, x.NProcs)
		peak(&tl.PSSPeak, x.PSS)
		peak(&tl.CgroupPeak, x.CgroupUsage)
		if x.CgroupLimit != nil {
			v := *x.CgroupLimit
			tl.CgroupLimit = &v
		}
		peak(&tl.GPUPeak, x.GPUUsed)
		peak(&tl.AllocPeak, x.Allocated)
		peak(&tl.ReservedPeak, x.Reserved)
	}
	tl.Sparkline = Sparkline(vals, 40)
	return tl
}
