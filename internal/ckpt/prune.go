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
	// DeleteRecordedBest lets the policy delete the checkpoints trainers
	// recorded as their best (HF best_model_checkpoint, Lightning
	// best_model_path), which prune otherwise always keeps.
	DeleteRecordedBest bool
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
	// MixedRuns names each directory whose HF checkpoints belong to more
	// than one training run; each run is its own series (MixedRuns).
	MixedRuns []string `json:"mixed_runs,omitempty"`
	// Items are the checkpoints and invalid checkpoint candidates, series by
	// series, each series newest first.
	Items []PruneItem `json:"items"`
	// LeftAlone are the files in a checkpoint format that are not
	// checkpoints, and the directories that look like checkpoint
	// directories and are not: prune never touches them.
	LeftAlone []LeftAlone `json:"left_alone"`
	// OtherFiles counts the files in no checkpoint format (logs, JSON,
	// text), which prune never touches either.
	OtherFiles int      `json:"other_files"`
	FreedBytes int64    `json:"freed_bytes"`
	Applied    bool     `json:"applied"`
	Deleted    []string `json:"deleted"`
}

// PlanPrune decides, for entries as returned by Scan, which to keep. Only
// checkpoints (KindCheckpoint) and invalid candidates (KindInvalid) can be
// deleted; every other entry is left alone and listed with its reason. The
// policy applies within each series (Entry.Series: same directory, same
// name with the step abstracted), so a checkpoint is only ever deleted in
// favour of newer checkpoints of its own series. In each series it never
// deletes the newest valid checkpoint, the best one by Metric (when a metric
// is given), or anything newer than the newest valid one (a save that may
// still be in progress, or evidence worth keeping); a series with no valid
// checkpoint is kept whole.
func PlanPrune(entries []Entry, pol PrunePolicy) (*PrunePlan, error) {
	if err := pol.Validate(); err != nil {
		return nil, err
	}
	es := append([]Entry(nil), entries...)
	SortNewestFirst(es)
	plan := &PrunePlan{Items: []PruneItem{}, LeftAlone: []LeftAlone{}, Deleted: []string{}, MixedRuns: MixedRuns(es)}
	var order []string
	series := map[string][]Entry{}
	for _, e := range es {
		switch {
		case e.Format == FormatLFSPointer:
			plan.LeftAlone = append(plan.LeftAlone, LeftAlone{Path: e.Path, Format: e.Format,
				Why: "a Git LFS pointer: the checkpoint itself is in Git LFS (`git lfs pull` fetches it), and deleting the pointer frees nothing"})
		case e.Kind == KindCheckpoint, e.Kind == KindInvalid:
			if _, ok := series[e.Series]; !ok {
				order = append(order, e.Series)
			}
			series[e.Series] = append(series[e.Series], e)
		default:
			why := e.Note
			if why == "" {
				why = "not recognised as a checkpoint"
			}
			plan.LeftAlone = append(plan.LeftAlone, LeftAlone{Path: e.Path, Format: e.Format, Why: "not a checkpoint: " + why})
		}
	}
	sort.SliceStable(plan.LeftAlone, func(i, j int) bool { return plan.LeftAlone[i].Path < plan.LeftAlone[j].Path })
	for _, name := range order {
		items := planSeries(series[name], pol)
		for _, it := range items {
			if !it.Keep {
				plan.FreedBytes += it.Size
			}
		}
		plan.Items = append(plan.Items, items...)
	}
	return plan, nil
}

// planSeries applies pol to the entries of one series, newest first.
func planSeries(es []Entry, pol PrunePolicy) []PruneItem {
	items := make([]PruneItem, len(es))
	for i, e := range es {
		items[i] = PruneItem{Entry: e, Why: []string{}}
	}
	keep := func(i int, why string) {
		items[i].Keep = true
		items[i].Why = append(items[i].Why, why)
	}
	newest := -1
	var valid []int
	for i := range es {
		if es[i].Kind == KindCheckpoint {
			valid = append(valid, i)
		}
	}
	if len(valid) == 0 {
		for i := range es {
			keep(i, "no valid checkpoint in its series")
		}
		return items
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
	for i := range items {
		if !items[i].Keep && es[i].Kind == KindInvalid {
			items[i].Why = append(items[i].Why, "invalid: "+es[i].Reason)
		}
	}
	return items
}

// metricOf looks up a metric in an entry's scalars.
func metricOf(e Entry, name string) (float64, bool) {
	v, ok := e.Metrics[name]
	return v, ok
}

// Prune scans dir, plans with pol, and deletes the planned checkpoints only
// when apply is true. Deletion is limited to checkpoints and invalid
// checkpoint candidates inside dir (a symlinked dir is followed).
func Prune(dir string, pol PrunePolicy, apply bool) (*PrunePlan, error) {
	t, err := scanTree(dir)
	if err != nil {
		return nil, err
	}
	// The checkpoint each series keeps as its newest valid one must pass
	// the full check, or prune would keep a damaged file alone.
	confirmNewest(t.entries, func(e *Entry) string { return e.Series })
	plan, err := PlanPrune(t.entries, pol)
	if err != nil {
		return nil, err
	}
	if !pol.DeleteRecordedBest {
		keepBestRefs(plan)
	}
	keepLinkTargets(plan)
	plan.LeftAlone = append(plan.LeftAlone, t.dirs...)
	sort.SliceStable(plan.LeftAlone, func(i, j int) bool { return plan.LeftAlone[i].Path < plan.LeftAlone[j].Path })
	plan.OtherFiles = t.otherFiles
	if !apply {
		return plan, nil
	}
	plan.Applied = true
	root, err := filepath.Abs(dir)
	if err != nil {
		return plan, err
	}
	// Every deletion is checked before the first one, so a refusal or a
	// missing permission leaves the directory as it was.
	var doomed []string
	for _, it := range plan.Items {
		if it.Keep {
			continue
		}
		if it.Kind != KindCheckpoint && it.Kind != KindInvalid {
			return plan, fmt.Errorf("refusing to delete %s: not recognised as a checkpoint; nothing deleted", it.Path)
		}
		p, err := filepath.Abs(it.Path)
		if err != nil || p == root || !strings.HasPrefix(p, root+string(filepath.Separator)) {
			return plan, fmt.Errorf("refusing to delete %s: outside %s; nothing deleted", it.Path, dir)
		}
		if err := underRoot(dir, p); err != nil {
			return plan, fmt.Errorf("refusing to delete %s: %v (%s); nothing deleted", it.Path, err, dir)
		}
		if err := checkDeletable(p); err != nil {
			return plan, fmt.Errorf("cannot delete %s: %v; nothing deleted", it.Path, err)
		}
		doomed = append(doomed, p)
	}
	for _, it := range plan.Items {
		if it.Keep {
			continue
		}
		p := doomed[0]
		doomed = doomed[1:]
		st, err := os.Lstat(p)
		if err == nil {
			err = removeFault(p)
		}
		if err == nil {
			if st.IsDir() {
				err = os.RemoveAll(p)
			} else {
				err = os.Remove(p)
			}
		}
		if err != nil {
			return plan, &PartialPruneError{Path: it.Path, Err: err, Deleted: plan.Deleted}
		}
		plan.Deleted = append(plan.Deleted, it.Path)
	}
	return plan, nil
}

// PartialPruneError is a deletion that failed after the checks passed (a
// file changed under prune): Deleted lists what was already deleted.
type PartialPruneError struct {
	Path    string
	Err     error
	Deleted []string
}

func (e *PartialPruneError) Error() string {
	if len(e.Deleted) == 0 {
		return fmt.Sprintf("delete %s: %v; nothing deleted", DisplayPath(e.Path), e.Err)
	}
	names := make([]string, len(e.Deleted))
	for i, d := range e.Deleted {
		names[i] = DisplayPath(d)
	}
	return fmt.Sprintf("delete %s: %v; already deleted: %s", DisplayPath(e.Path), e.Err, strings.Join(names, ", "))
}

func (e *PartialPruneError) Unwrap() error { return e.Err }
