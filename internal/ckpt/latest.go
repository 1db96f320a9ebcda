package ckpt

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Entry is one checkpoint candidate found under a directory.
type Entry struct {
	Path    string    `json:"path"`   // file or directory (DCP, HF checkpoint-N)
	Format  string    `json:"format"` // FormatTorchZip, FormatSafetensors, FormatDCP, FormatHFTrainer, ...
	Layout  string    `json:"layout,omitempty"`
	Valid   bool      `json:"valid"`
	Reason  string    `json:"reason,omitempty"` // why invalid ("" when valid)
	ModTime time.Time `json:"mtime"`
	Size    int64     `json:"size"`
	Step    *int64    `json:"step,omitempty"`  // when known from metadata
	Epoch   *int64    `json:"epoch,omitempty"` // when known from metadata
	Tensors int       `json:"tensors"`
	// Metrics are the top-level numeric scalars other than step and epoch
	// (loss, accuracy, best_metric, ...).
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// MaxScanDepth is how deep Scan descends below the directory it is given.
const MaxScanDepth = 6

// Scan lists every checkpoint under dir, newest first (see Newer). Files are
// recognised by their bytes, never by their names; files that are not
// checkpoints (logs, JSON, text) are left out. A directory that is itself a
// checkpoint (DCP, HF checkpoint-N) is one entry and is not descended into.
// Each entry is checked structurally (no deep CRC pass). err is non-nil only
// when dir itself cannot be read.
func Scan(dir string) ([]Entry, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, &UnreadableError{fmt.Errorf("stat %s: %w", dir, err)}
	}
	if !st.IsDir() {
		return nil, &UnreadableError{fmt.Errorf("%s is not a directory", dir)}
	}
	if _, err := os.ReadDir(dir); err != nil {
		return nil, &UnreadableError{fmt.Errorf("read %s: %w", dir, err)}
	}
	var out []Entry
	base := strings.Count(filepath.Clean(dir), string(filepath.Separator))
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // an unreadable subdirectory is skipped
		}
		if d.IsDir() {
			if strings.Count(filepath.Clean(p), string(filepath.Separator))-base > MaxScanDepth {
				return filepath.SkipDir
			}
			if p != dir && detectDir(p) != "" {
				if rep, err := Inspect(p, Options{Structure: true}); err == nil {
					out = append(out, entryOf(rep))
				}
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, size, err := openFile(p)
		if err != nil {
			return nil
		}
		format := detectFile(f, size)
		f.Close()
		if format == "" && size > 0 {
			return nil
		}
		if size == 0 {
			return nil // an empty file is nobody's checkpoint candidate
		}
		if rep, err := Inspect(p, Options{Structure: true}); err == nil {
			out = append(out, entryOf(rep))
		}
		return nil
	})
	if err != nil {
		return nil, &UnreadableError{fmt.Errorf("scan %s: %w", dir, err)}
	}
	// The directory itself may be a checkpoint directory.
	if len(out) == 0 && detectDir(dir) != "" {
		if rep, err := Inspect(dir, Options{Structure: true}); err == nil {
			out = append(out, entryOf(rep))
		}
	}
	SortNewestFirst(out)
	return out, nil
}

func entryOf(r *Report) Entry {
	e := Entry{Path: r.Path, Format: r.Format, Layout: r.Layout, Valid: r.Valid, Reason: r.Reason,
		ModTime: r.ModTime, Size: r.Size, Step: r.Step, Epoch: r.Epoch, Tensors: len(r.Tensors)}
	for k, v := range r.Scalars {
		if strings.Contains(k, ".") && !strings.HasPrefix(k, "__metadata__") {
			continue
		}
		switch k {
		case "epoch", "step", "global_step":
			continue
		}
		switch x := v.(type) {
		case float64:
			if e.Metrics == nil {
				e.Metrics = map[string]float64{}
			}
			e.Metrics[k] = x
		case int64:
			if e.Metrics == nil {
				e.Metrics = map[string]float64{}
			}
			e.Metrics[k] = float64(x)
		}
	}
	return e
}

// Newer reports whether a is a later checkpoint than b: by step when both
// know it, else by epoch when both know it, else by modification time (and
// by path for a stable order).
func Newer(a, b *Entry) bool {
	switch {
	case a.Step != nil && b.Step != nil && *a.Step != *b.Step:
		return *a.Step > *b.Step
	case a.Epoch != nil && b.Epoch != nil && *a.Epoch != *b.Epoch:
		return *a.Epoch > *b.Epoch
	case !a.ModTime.Equal(b.ModTime):
		return a.ModTime.After(b.ModTime)
	}
	return a.Path > b.Path
}

// SortNewestFirst orders entries by Newer. Because step and epoch are not
// known for every entry, Newer alone is not a total order; sorting uses the
// ranking key (step, epoch, mtime) only where every entry has it.
func SortNewestFirst(es []Entry) {
	allStep, allEpoch := true, true
	for i := range es {
		allStep = allStep && es[i].Step != nil
		allEpoch = allEpoch && es[i].Epoch != nil
	}
	sort.SliceStable(es, func(i, j int) bool {
		a, b := &es[i], &es[j]
		if allStep && *a.Step != *b.Step {
			return *a.Step > *b.Step
		}
		if allEpoch && *a.Epoch != *b.Epoch {
			return *a.Epoch > *b.Epoch
		}
		if !a.ModTime.Equal(b.ModTime) {
			return a.ModTime.After(b.ModTime)
		}
		return a.Path > b.Path
	})
}

// Latest scans dir (recursively, MaxScanDepth levels) and returns the newest
// valid checkpoint (plain pickles count only when they hold tensors, a step
// or an epoch) — by step or epoch when the valid candidates all carry it,
// else by modification time — and the invalid entries that are newer than it
// (a torn save, a truncated copy), which a resume must not pick. best is nil
// when there is no valid checkpoint. err only for an unreadable dir.
func Latest(dir string) (best *Entry, skippedNewer []Entry, err error) {
	es, err := Scan(dir)
	if err != nil {
		return nil, nil, err
	}
	return pickLatest(es)
}

// Resumable reports whether an entry can be a resume point: a plain pickle
// holding no tensors and no step or epoch (a dataset cache, a config) is a
// pickle, not a checkpoint.
func (e *Entry) Resumable() bool {
	if e.Format == FormatPickle && e.Valid {
		return e.Tensors > 0 || e.Step != nil || e.Epoch != nil
	}
	return true
}

func pickLatest(es []Entry) (*Entry, []Entry, error) {
	var valid []Entry
	for _, e := range es {
		if e.Valid && e.Resumable() {
			valid = append(valid, e)
		}
	}
	var skipped []Entry
	if len(valid) == 0 {
		for _, e := range es {
			skipped = append(skipped, e)
		}
		return nil, skipped, nil
	}
	SortNewestFirst(valid)
	b := valid[0]
	for _, e := range es {
		if !e.Valid && Newer(&e, &b) {
			skipped = append(skipped, e)
		}
	}
	return &b, skipped, nil
}
