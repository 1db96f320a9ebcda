package ckpt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// hfRunIdentity names the training run an HF Trainer checkpoint belongs
// to, from what the Trainer writes into every checkpoint of a run and
// what differs between runs: trainer_state.json's max_steps,
// num_train_epochs, train_batch_size and save_steps, the first entry of
// its log_history (every checkpoint of one run starts with the same
// one), and the LoRA target modules of an adapter_config.json. Two
// checkpoints of one output directory with different identities are two
// runs, whose steps do not compare.
func hfRunIdentity(dir string, hs *hfState) string {
	var parts []string
	if hs.MaxSteps != nil {
		parts = append(parts, fmt.Sprintf("max_steps %d", *hs.MaxSteps))
	}
	if hs.NumTrainEpochs != nil {
		parts = append(parts, fmt.Sprintf("epochs %g", *hs.NumTrainEpochs))
	}
	if hs.TrainBatchSize != nil {
		parts = append(parts, fmt.Sprintf("batch %d", *hs.TrainBatchSize))
	}
	if hs.SaveSteps != nil {
		parts = append(parts, fmt.Sprintf("save_steps %d", *hs.SaveSteps))
	}
	if len(hs.LogHistory) > 0 {
		if b, err := json.Marshal(hs.LogHistory[0]); err == nil {
			parts = append(parts, "first log "+string(b))
		}
	}
	if t := adapterTargets(dir); t != "" {
		parts = append(parts, "target_modules "+t)
	}
	return strings.Join(parts, ", ")
}

// adapterTargets is the sorted target_modules of dir's adapter_config.json
// (PEFT), "" when there is none.
func adapterTargets(dir string) string {
	b, err := readBounded(filepath.Join(dir, "adapter_config.json"), maxSmallJSON)
	if err != nil {
		return ""
	}
	var ac struct {
		TargetModules any `json:"target_modules"`
	}
	if json.Unmarshal(b, &ac) != nil {
		return ""
	}
	switch t := ac.TargetModules.(type) {
	case string:
		return t
	case []any:
		var s []string
		for _, x := range t {
			s = append(s, fmt.Sprint(x))
		}
		sort.Strings(s)
		return strings.Join(s, "+")
	}
	return ""
}

// runFields splits an identity into its fields by name.
func runFields(run string) map[string]string {
	m := map[string]string{}
	for _, p := range strings.Split(run, ", ") {
		k, v, _ := strings.Cut(p, " ")
		m[k] = v
	}
	return m
}

// sameRun: two identities are one run when every field both record
// agrees (a checkpoint saved before the first log has no first log).
func sameRun(a, b string) bool {
	fa, fb := runFields(a), runFields(b)
	for k, v := range fa {
		if w, ok := fb[k]; ok && w != v {
			return false
		}
	}
	return true
}

// separateRuns gives the HF checkpoints of each directory their run's
// fullest identity (one that lacks a field takes the one run it agrees
// with, when there is exactly one) and, where a directory holds more than
// one run, makes each run a series of its own: prune never deletes one
// run's checkpoint in favour of another's.
func separateRuns(es []Entry) {
	byDir := map[string][]int{}
	for i := range es {
		if es[i].Run != "" {
			d := filepath.Dir(es[i].Path)
			byDir[d] = append(byDir[d], i)
		}
	}
	for _, idx := range byDir {
		var ids []string // distinct identities, fullest first
		seen := map[string]bool{}
		for _, i := range idx {
			if !seen[es[i].Run] {
				seen[es[i].Run] = true
				ids = append(ids, es[i].Run)
			}
		}
		sort.SliceStable(ids, func(a, b int) bool { return len(runFields(ids[a])) > len(runFields(ids[b])) })
		canon := map[string]string{}
		for _, id := range ids {
			var match []string
			for _, c := range ids {
				if c != id && len(runFields(c)) > len(runFields(id)) && sameRun(id, c) && canon[c] == c {
					match = append(match, c)
				}
			}
			canon[id] = id
			if len(match) == 1 {
				canon[id] = match[0]
			}
		}
		runs := map[string]bool{}
		for _, i := range idx {
			es[i].Run = canon[es[i].Run]
			runs[es[i].Run] = true
		}
		if len(runs) < 2 {
			continue
		}
		for _, i := range idx {
			es[i].Series += " [run " + es[i].Run + "]"
		}
	}
}

// runLabel is the short form of a run identity for messages: its
// max_steps and target modules.
func runLabel(run string) string {
	var keep []string
	for _, p := range strings.Split(run, ", ") {
		if strings.HasPrefix(p, "max_steps ") || strings.HasPrefix(p, "target_modules ") {
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		return run
	}
	return strings.Join(keep, ", ")
}

// hfIncomplete says what an HF checkpoint lacks for a resume ("" when
// nothing): without optimizer.pt the Trainer resumes with a fresh
// optimizer and scheduler, silently.
func hfIncomplete(dir string) string {
	for _, n := range []string{"optimizer.pt", "optimizer.bin", "optimizer.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return ""
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "optimizer*")); len(m) > 0 {
		return "" // sharded or distributed optimizer state
	}
	return "incomplete for a resume: no optimizer.pt (the Trainer resumes it with a fresh optimizer and learning-rate schedule, silently: the weights load, the optimizer's state is lost)"
}

// hfRun is one training run's checkpoints in a directory.
type hfRun struct {
	id     string
	newest *Entry
	names  []string
}

// runsIn groups the sound HF checkpoints of es directly under dir by run,
// the run written last (its newest checkpoint's modification time) first.
func runsIn(es []Entry, dir string) []*hfRun {
	byID := map[string]*hfRun{}
	var runs []*hfRun
	for i := range es {
		e := &es[i]
		if e.Run == "" || e.Kind != KindCheckpoint || filepath.Dir(e.Path) != dir {
			continue
		}
		r := byID[e.Run]
		if r == nil {
			r = &hfRun{id: e.Run}
			byID[e.Run] = r
			runs = append(runs, r)
		}
		r.names = append(r.names, filepath.Base(e.Path))
		if r.newest == nil || Newer(e, r.newest) {
			r.newest = e
		}
	}
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i].newest, runs[j].newest
		if !a.ModTime.Equal(b.ModTime) {
			return a.ModTime.After(b.ModTime)
		}
		return Newer(a, b)
	})
	return runs
}

func describeRuns(dir string, runs []*hfRun) string {
	var desc []string
	for _, r := range runs {
		sort.Strings(r.names)
		desc = append(desc, fmt.Sprintf("%s: %s", runLabel(r.id), strings.Join(r.names, " ")))
	}
	return fmt.Sprintf("%s mixes %d training runs, whose steps do not compare (%s)", DisplayPath(dir), len(runs), strings.Join(desc, "; "))
}

// MixedRuns says, for each directory of es whose HF Trainer checkpoints
// belong to more than one training run (an output_dir reused by runs
// with other settings), which runs and checkpoints it holds. latest and
// prune act on each run apart.
func MixedRuns(es []Entry) []string {
	dirs := map[string]bool{}
	var out []string
	for _, e := range es {
		d := filepath.Dir(e.Path)
		if e.Run == "" || dirs[d] {
			continue
		}
		dirs[d] = true
		if runs := runsIn(es, d); len(runs) > 1 {
			out = append(out, describeRuns(d, runs))
		}
	}
	sort.Strings(out)
	return out
}

// mixedRuns: when the sound HF checkpoints of the picked one's directory
// belong to several runs, latest takes the newest checkpoint of the run
// written last and says the directory mixes runs.
func mixedRuns(valid []Entry, res *LatestResult) {
	if res.Best == nil || res.Best.Run == "" {
		return
	}
	dir := filepath.Dir(res.Best.Path)
	runs := runsIn(valid, dir)
	if len(runs) < 2 {
		return
	}
	pick := runs[0].newest
	msg := describeRuns(dir, runs) + fmt.Sprintf("; picked %s, the newest checkpoint of the run written last", DisplayPath(filepath.Base(pick.Path)))
	if pick.Path != res.Best.Path {
		msg += fmt.Sprintf(", not %s (the highest step, another run's)", DisplayPath(filepath.Base(res.Best.Path)))
	}
	res.Disagreement = msg
	b := *pick
	res.Best = &b
}
