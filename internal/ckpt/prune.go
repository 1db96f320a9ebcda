package ckpt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// PrunePolicy says which checkpoints to keep; everything else is deleted.
type PrunePolicy struct {
	KeepLast  int    // the N newest valid checkpoints
	KeepBest  int    // the K best by Metric
	Metric    string // a scalar name (loss, val_acc, eval_loss, ...)
	Mode      string // "min" or "max"
	KeepEvery int    // checkpoints whose step (else epoch) is a multiple of N
}

// Validate checks the policy for usage errors.
func (p PrunePolicy) Validate() error {
	switch {
	case p.KeepLast < 0 || p.KeepBest < 0 || p.KeepEvery < 0:
		return errors.New("--keep-last, --keep-best and --keep-every must not be negative")
	case p.KeepBest > 0 && p.Metric == "":
		return errors.New("--keep-best needs --metric")
	case p.Metric != "" && p.Mode != "min" && p.Mode != "max":
		return fmt.Errorf("--mode must be min or max, not %q", p.Mode)
	}
	return nil
}

// PruneItem is one checkpoint and what the plan does with it.
type PruneItem struct {
	Entry
	Keep bool     `json:"keep"`
	Why  []string `json:"why"`
}

// PrunePlan is the outcome of a policy over a directory.
type PrunePlan struct {
	Items      []PruneItem `json:"items"` // newest first
	FreedBytes int64       `json:"freed_bytes"`
	Applied    bool        `json:"applied"`
	Deleted    []string    `json:"deleted"`
}

// PlanPrune decides, for entries as returned by Scan, which to keep. It never
// deletes the newest valid checkpoint, the best one by Metric (when a metric
// is given), or anything newer than the newest valid one (a save that may
// still be in progress, or evidence worth keeping). With no valid checkpoint
// at all it deletes nothing.
func PlanPrune(entries []Entry, pol PrunePolicy) (*PrunePlan, error) {
	if err := pol.Validate(); err != nil {
		return nil, err
	}
	es := append([]Entry(nil), entries...)
	SortNewestFirst(es)
	plan := &PrunePlan{Items: make([]PruneItem, len(es)), Deleted: []string{}}
	for i, e := range es {
		plan.Items[i] = PruneItem{Entry: e, Why: []string{}}
	}
	keep := func(i int, why string) {
		plan.Items[i].Keep = true
		plan.Items[i].Why = append(plan.Items[i].Why, why)
	}
	newest := -1
	var valid []int
	for i := range es {
		if es[i].Valid {
			valid = append(valid, i)
		}
	}
	if len(valid) == 0 {
		for i := range es {
			keep(i, "no valid checkpoint in the directory")
		}
		return plan, nil
	}
	// The newest valid one is the first valid entry under the same order
	// Latest uses.
	vs := make([]Entry, len(valid))
	for k, i := range valid {
		vs[k] = es[i]
	}
	SortNewestFirst(vs)
	for i := range es {
		if es[i].Path == vs[0].Path {
			newest = i
		}
	}
	keep(newest, "newest valid")
	for i := range es {
		if i != newest && Newer(&es[i], &es[newest]) {
			keep(i, "newer than the newest valid")
		}
	}
	for k := 0; k < pol.KeepLast && k < len(vs); k++ {
		for i := range es {
			if es[i].Path == vs[k].Path {
				keep(i, fmt.Sprintf("keep-last %d", pol.KeepLast))
			}
		}
	}
	if pol.Metric != "" {
		var scored []int
		for _, i := range valid {
			if _, ok := metricOf(es[i], pol.Metric); ok {
				scored = append(scored, i)
			}
		}
		sort.SliceStable(scored, func(a, b int) bool {
			x, _ := metricOf(es[scored[a]], pol.Metric)
			y, _ := metricOf(es[scored[b]], pol.Metric)
			if pol.Mode == "min" {
				return x < y
			}
			return x > y
		})
		k := pol.KeepBest
		if k < 1 {
			k = 1
		}
		for j := 0; j < k && j < len(scored); j++ {
			why := fmt.Sprintf("best %d by %s (%s)", pol.KeepBest, pol.Metric, pol.Mode)
			if j == 0 {
				why = fmt.Sprintf("best by %s (%s)", pol.Metric, pol.Mode)
			}
			keep(scored[j], why)
		}
	}
	if pol.KeepEvery > 0 {
		for _, i := range valid {
			n := es[i].Step
			if n == nil {
				n = es[i].Epoch
			}
			if n != nil && *n%int64(pol.KeepEvery) == 0 {
				keep(i, fmt.Sprintf("keep-every %d", pol.KeepEvery))
			}
		}
	}
	for i := range plan.Items {
		if !plan.Items[i].Keep {
			if !es[i].Valid {
				plan.Items[i].Why = append(plan.Items[i].Why, "invalid: "+es[i].Reason)
			}
			plan.FreedBytes += es[i].Size
		}
	}
	return plan, nil
}

// metricOf looks up a metric in an entry's scalars.
func metricOf(e Entry, name string) (float64, bool) {
	v, ok := e.Metrics[name]
	return v, ok
}

// Prune scans dir, plans with pol, and deletes the planned checkpoints only
// when apply is true. Deletion is limited to paths inside dir.
func Prune(dir string, pol PrunePolicy, apply bool) (*PrunePlan, error) {
	es, err := Scan(dir)
	if err != nil {
		return nil, err
	}
	plan, err := PlanPrune(es, pol)
	if err != nil {
		return nil, err
	}
	if !apply {
		return plan, nil
	}
	plan.Applied = true
	root, err := filepath.Abs(dir)
	if err != nil {
		return plan, err
	}
	for _, it := range plan.Items {
		if it.Keep {
			continue
		}
		p, err := filepath.Abs(it.Path)
		if err != nil || p == root || !strings.HasPrefix(p, root+string(filepath.Separator)) {
			return plan, fmt.Errorf("refusing to delete %s: outside %s", it.Path, dir)
		}
		st, err := os.Lstat(p)
		if err != nil {
			return plan, fmt.Errorf("delete %s: %w", it.Path, err)
		}
		if st.IsDir() {
			err = os.RemoveAll(p)
		} else {
			err = os.Remove(p)
		}
		if err != nil {
			return plan, fmt.Errorf("delete %s: %w", it.Path, err)
		}
		plan.Deleted = append(plan.Deleted, it.Path)
	}
	return plan, nil
}
