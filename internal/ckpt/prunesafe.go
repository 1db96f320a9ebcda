package ckpt

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode"

	"golang.org/x/sys/unix"
)

// keepLinkTargets keeps every item that is the same file or directory as
// a kept one: a symlink prune keeps (best.pt, Lightning's last.ckpt) keeps
// its target alive, and a target that is kept keeps no link dangling that
// is deleted only as a link anyway. Items are matched by their resolved
// paths.
func keepLinkTargets(plan *PrunePlan) {
	real := make([]string, len(plan.Items))
	for i, it := range plan.Items {
		if r, err := filepath.EvalSymlinks(it.Path); err == nil {
			real[i] = r
		}
	}
	for changed := true; changed; {
		changed = false
		for i := range plan.Items {
			if !plan.Items[i].Keep || real[i] == "" {
				continue
			}
			for j := range plan.Items {
				if plan.Items[j].Keep || real[j] != real[i] {
					continue
				}
				why := "the same file as the kept " + plan.Items[i].Path
				if st, err := os.Lstat(plan.Items[i].Path); err == nil && st.Mode()&os.ModeSymlink != 0 {
					why = "target of the kept link " + plan.Items[i].Path
				}
				plan.Items[j].Keep = true
				plan.Items[j].Why = append(plan.Items[j].Why, why)
				plan.FreedBytes -= plan.Items[j].Size
				changed = true
			}
		}
	}
}

// keepBestRefs keeps the checkpoints a trainer recorded as its best: HF
// Trainer's best_model_checkpoint (trainer_state.json) and Lightning's
// ModelCheckpoint best_model_path. The recorded path is the one on the
// machine and in the working directory that trained (often absolute,
// often moved since), so a checkpoint matches by its name alone: when
// unsure, keep.
func keepBestRefs(plan *PrunePlan) {
	type ref struct{ path, from string }
	var refs []ref
	for _, it := range plan.Items {
		for _, b := range it.BestRefs {
			refs = append(refs, ref{b, it.Path})
		}
	}
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.Keep {
			continue
		}
		for _, r := range refs {
			if sameCheckpointRef(r.path, it.Path) {
				it.Keep = true
				it.Why = append(it.Why, "recorded as the best checkpoint by "+r.from)
				plan.FreedBytes -= it.Size
				break
			}
		}
	}
}

// sameCheckpointRef matches a recorded path by its last element, as the
// training machine wrote it: with / or, on Windows, with a backslash
// (E:\runs\checkpoints\epoch=98-step=6039.ckpt). Either reading
// matching is a match: when unsure, keep.
func sameCheckpointRef(ref, path string) bool {
	base := filepath.Base(path)
	if filepath.Base(filepath.Clean(ref)) == base {
		return true
	}
	ref = strings.TrimRight(ref, `/\`)
	return ref[strings.LastIndexAny(ref, `/\`)+1:] == base
}

// bestRefsOf returns the scalars where trainers record their best
// checkpoint.
func bestRefsOf(sc map[string]any) []string {
	keys := make([]string, 0, len(sc))
	for k := range sc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		s, ok := sc[k].(string)
		if !ok || s == "" {
			continue
		}
		if k == "best_model_checkpoint" || strings.HasSuffix(k, ".best_model_path") {
			out = append(out, s)
		}
	}
	return out
}

// checkDeletable says why a planned deletion could not happen: removing a
// name needs write and search permission on its directory, and removing a
// directory tree needs them on every directory in it. Prune checks every
// deletion before the first one, so it does not stop half-way.
func checkDeletable(p string) error {
	parent := filepath.Dir(p)
	if err := unix.Access(parent, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot remove entries of %s: %v", parent, err)
	}
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return nil
	}
	return filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if err := unix.Access(q, unix.W_OK|unix.X_OK|unix.R_OK); err != nil {
				return fmt.Errorf("cannot remove entries of %s: %v", q, err)
			}
		}
		return nil
	})
}

// sizeLike: a digit run that names a model size rather than a count
// (resnet18, llama-7b, gpt2-350m, efficientnet-b0).
func sizeLike(name string, start, end int) bool {
	// followed by a size unit and then no letter: 7b, 350m, 13B, 1k
	if end < len(name) && strings.ContainsRune("bBmMkKtT", rune(name[end])) &&
		(end+1 == len(name) || !unicode.IsLetter(rune(name[end+1]))) {
		return true
	}
	if start == 0 || !unicode.IsLetter(rune(name[start-1])) {
		return false // after a separator: -100, _3, =1000
	}
	// Attached to a word: a count only after a counter word.
	i := start
	for i > 0 && unicode.IsLetter(rune(name[i-1])) {
		i--
	}
	switch strings.ToLower(name[i:start]) {
	case "step", "steps", "epoch", "epochs", "ep", "iter", "iteration", "it", "ckpt", "checkpoint", "save", "v", "version", "e", "s":
		return false
	}
	return true
}

// refineSeries splits a series (names equal once digit runs are
// abstracted) whose names differ in a digit run that looks like a model
// size (resnet18.pt, resnet50.pt; llama-7b.pt, llama-13b.pt) into one
// series per file, unless the step or epoch inside every one of them
// proves they are one run's checkpoints (each records one, no two the
// same). When unsure, each is its own series and prune keeps it.
func refineSeries(es []Entry) {
	groups := map[string][]int{}
	for i := range es {
		groups[es[i].Series] = append(groups[es[i].Series], i)
	}
	for _, idx := range groups {
		if len(idx) < 2 || provenByCounters(es, idx) {
			continue
		}
		names := make([]string, len(idx))
		runs := make([][][]int, len(idx))
		for k, i := range idx {
			names[k] = filepath.Base(es[i].Path)
			runs[k] = digitRun.Regexp().FindAllStringIndex(names[k], -1)
		}
		split := false
		for r := range runs[0] {
			varies := false
			for k := range idx {
				if r >= len(runs[k]) {
					varies = true
					break
				}
				if names[k][runs[k][r][0]:runs[k][r][1]] != names[0][runs[0][r][0]:runs[0][r][1]] {
					varies = true
				}
			}
			if !varies {
				continue
			}
			for k := range idx {
				if r < len(runs[k]) && sizeLike(names[k], runs[k][r][0], runs[k][r][1]) {
					split = true
				}
			}
		}
		if split {
			for _, i := range idx {
				es[i].Series = es[i].Path
			}
		}
	}
}

// provenByCounters: every entry records a step (or every one an epoch),
// and no two the same.
func provenByCounters(es []Entry, idx []int) bool {
	for _, get := range []func(*Entry) *int64{func(e *Entry) *int64 { return e.Step }, func(e *Entry) *int64 { return e.Epoch }} {
		seen := map[int64]bool{}
		ok := true
		for _, i := range idx {
			v := get(&es[i])
			if v == nil || seen[*v] {
				ok = false
				break
			}
			seen[*v] = true
		}
		if ok {
			return true
		}
	}
	return false
}

// removeFault lets a test make one deletion fail the way a disk can after
// every check passed (EIO, a file system gone read-only); nil otherwise.
var (
	faultMu   sync.Mutex
	faultPath string
	faultErr  error
)

func removeFault(p string) error {
	faultMu.Lock()
	defer faultMu.Unlock()
	if p == faultPath {
		return faultErr
	}
	return nil
}

func setRemoveFault(p string, err error) {
	faultMu.Lock()
	faultPath, faultErr = p, err
	faultMu.Unlock()
}
