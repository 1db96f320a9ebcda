package agent

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/ranks"
	"github.com/vramguard/vramguard/internal/usage"
)

// groupPlace is a job's part in a distributed job on this node: the
// group (Slurm job id, run --group's name), the ranks its processes hold
// and the host memory the job asked for here. It is kept with the job's
// record, so report --group reads it over the agent's history.
type groupPlace struct {
	Group      string `json:"group"`
	Node       string `json:"node"`
	Ranks      []int  `json:"ranks"`
	MemRequest uint64 `json:"mem_request_bytes,omitempty"`
}

// groupPlaces are the groups j's processes on this node belong to, by
// their environment (attrib.Process's rank fields). Within a group, a
// process known only by Slurm's task id while others have a launcher's
// rank is their launcher, not a rank (as ranksOf).
func (a *Agent) groupPlaces(j *attrib.Job) []groupPlace {
	launched := map[string]bool{}
	for k := range j.Processes {
		if p := &j.Processes[k]; p.Rank != nil && p.Group != "" && p.RankFrom != ranks.SourceSlurm {
			launched[p.Group] = true
		}
	}
	var out []groupPlace
	for k := range j.Processes {
		p := &j.Processes[k]
		if p.Rank == nil || p.Group == "" || !a.cfg.isThisNode(p.Node) || (p.RankFrom == ranks.SourceSlurm && launched[p.Group]) {
			continue
		}
		i := slices.IndexFunc(out, func(g groupPlace) bool { return g.Group == p.Group })
		if i < 0 {
			i = len(out)
			out = append(out, groupPlace{Group: p.Group, Node: a.cfg.Node})
		}
		if !slices.Contains(out[i].Ranks, *p.Rank) {
			out[i].Ranks = append(out[i].Ranks, *p.Rank)
			slices.Sort(out[i].Ranks)
		}
		out[i].MemRequest = max(out[i].MemRequest, p.MemRequest)
	}
	return out
}

func sameGroupPlaces(a, b []groupPlace) bool {
	return slices.EqualFunc(a, b, func(x, y groupPlace) bool {
		return x.Group == y.Group && x.Node == y.Node && x.MemRequest == y.MemRequest && slices.Equal(x.Ranks, y.Ranks)
	})
}

// GroupReport is the efficiency of distributed job group on this node over
// [from, to] (see usage.ComputeGroup): each of its jobs here, from the
// agent's stored history; keep, when set, says which owners' jobs count.
func (a *Agent) GroupReport(ctx context.Context, group string, from, to time.Time, keep func(uid int) bool) (usage.GroupReport, error) {
	if err := a.tl.Flush(ctx); err != nil {
		return usage.GroupReport{}, err
	}
	stored, err := a.cfg.Store.AgentJobs(ctx, from)
	if err != nil {
		return usage.GroupReport{}, err
	}
	interval, _ := a.cfg.Sampler.Intervals()
	var in []usage.GroupJob
	for _, j := range stored {
		var info struct {
			Labels Labels       `json:"labels"`
			Limit  uint64       `json:"limit_bytes"`
			Groups []groupPlace `json:"groups"`
		}
		if json.Unmarshal(j.Info, &info) != nil {
			continue
		}
		i := slices.IndexFunc(info.Groups, func(g groupPlace) bool { return g.Group == group })
		if i < 0 || (keep != nil && !keep(info.Labels.UID)) {
			continue
		}
		fine, coarse, err := a.tl.Samples(ctx, j.ID, from, to)
		if err != nil {
			return usage.GroupReport{}, err
		}
		gp := info.Groups[i]
		name := info.Labels.Job
		if name == "" {
			name = j.Name
		}
		in = append(in, usage.GroupJob{
			Job: usage.Job{Key: j.Key, Name: name, User: info.Labels.User,
				Series: []usage.Series{{Step: a.tl.Retention().CoarseStep, Points: coarse}, {Step: interval, Points: fine}}},
			Node: gp.Node, Ranks: gp.Ranks, GPUTotal: int64(info.Limit), MemRequest: int64(gp.MemRequest)})
	}
	return usage.ComputeGroup(group, in, a.cfg.Idle.withDefaults().Threshold, from, to), nil
}
