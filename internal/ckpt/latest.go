package ckpt

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/lazyre"
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
	// EpochValue, Run, Incomplete: as in Report.
	EpochValue *float64 `json:"epoch_value,omitempty"`
	Run        string   `json:"run,omitempty"`
	Incomplete string   `json:"incomplete,omitempty"`
	Tensors    int      `json:"tensors"`
	// Metrics are the top-level numeric scalars other than step and epoch
	// (loss, accuracy, best_metric, ...).
	Metrics Metrics `json:"metrics,omitempty"`
	// Kind says what the entry was recognised as, by what it holds:
	// KindCheckpoint, KindInvalid or KindOther.
	Kind string `json:"kind"`
	// Note says why a KindOther entry is not a checkpoint.
	Note string `json:"note,omitempty"`
	// Series groups checkpoints saved by one job: the entry's directory and
	// its name with every run of digits replaced by "#" (ckpt-100.pt and
	// ckpt-200.pt are both <dir>/ckpt-#.pt). Prune acts within a series.
	Series string `json:"series"`
	// BestRefs are the paths a trainer recorded in this checkpoint as its
	// best one (HF best_model_checkpoint, Lightning best_model_path):
	// prune never deletes them.
	BestRefs []string `json:"best_refs,omitempty"`
}

// Entry kinds.
const (
	// KindCheckpoint: a sound checkpoint: model weights (a state_dict, a
	// training dict holding one, a pickled module, Lightning, safetensors)
	// or a checkpoint directory (DCP, HF Trainer checkpoint-N).
	KindCheckpoint = "checkpoint"
	// KindInvalid: a checkpoint container (torch zip, legacy torch,
	// safetensors, DCP or HF directory) that fails the structural check: a
	// torn save, a truncated copy. Latest never picks one.
	KindInvalid = "invalid"
	// KindOther: a file in a checkpoint format (a pickle, a torch.save) that
	// holds no model weights: a config, a vocabulary, training arguments,
	// optimizer state alone, one shard of a sharded model. Latest never picks
	// one and Prune never deletes one.
	KindOther = "other"
)

// IsCheckpoint reports whether the entry is a sound checkpoint.
func (e *Entry) IsCheckpoint() bool { return e.Kind == KindCheckpoint }

// MaxScanDepth is how deep Scan descends below the directory it is given.
const MaxScanDepth = 6

// Scan lists every checkpoint candidate under dir: checkpoints and invalid
// candidates newest first (see SortNewestFirst), then the files in a
// checkpoint format that are not checkpoints (KindOther) by path. Files are
// recognised by their bytes, never by their names; files in no checkpoint
// format (logs, JSON, text) are left out. A directory that is itself a
// checkpoint (DCP, HF checkpoint-N) is one entry and is not descended into.
// Each entry is checked structurally (no deep CRC pass). A symlinked dir is
// followed; paths in the entries are under dir as given. err is non-nil only
// when dir itself cannot be read.
func Scan(dir string) ([]Entry, error) {
	t, err := scanTree(dir)
	if err != nil {
		return nil, err
	}
	return t.entries, nil
}

// LeftAlone is something Scan looked at and did not take for a checkpoint.
type LeftAlone struct {
	Path   string `json:"path"`
	Format string `json:"format,omitempty"`
	Why    string `json:"why"`
}

// tree is what a scan found.
type tree struct {
	entries []Entry
	// dirs are directories that hold a file a checkpoint directory would
	// (.metadata, trainer_state.json) but are not checkpoints.
	dirs []LeftAlone
	// otherFiles counts regular files in no checkpoint format.
	otherFiles int
}

func scanTree(dir string) (*tree, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, Unreadable(err)
	}
	if !st.IsDir() {
		return nil, &UnreadableError{fmt.Errorf("%s is not a directory", dir)}
	}
	if _, err := os.ReadDir(dir); err != nil {
		return nil, Unreadable(err)
	}
	// WalkDir does not follow a symlinked root: resolve it, walk the
	// target, and name what is found under dir as given.
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, &UnreadableError{fmt.Errorf("resolve %s: %w", dir, err)}
	}
	outside := func(p string) string {
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return dir
		}
		return filepath.Join(dir, rel)
	}
	t := &tree{}
	add := func(rep *Report) {
		rep.Path = outside(rep.Path)
		t.entries = append(t.entries, entryOf(rep))
	}
	base := strings.Count(filepath.Clean(root), string(filepath.Separator))
	err = walkFollow(root, func(p string, d fs.DirEntry, err error) error { // fswalk.go: follows symlinks
		if err != nil {
			if p == root {
				return err
			}
			return nil // an unreadable subdirectory is skipped
		}
		if d.IsDir() {
			if strings.Count(filepath.Clean(p), string(filepath.Separator))-base > MaxScanDepth {
				return filepath.SkipDir
			}
			if p == root {
				return nil
			}
			if detectDir(p) != "" {
				if rep, err := Inspect(p, Options{Structure: true}); err == nil {
					add(rep)
				}
				return filepath.SkipDir
			}
			if why := notCheckpointDir(p); why != "" {
				t.dirs = append(t.dirs, LeftAlone{Path: outside(p), Why: why})
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
		if format == "" || size == 0 {
			t.otherFiles++ // an empty file is nobody's checkpoint candidate
			return nil
		}
		if rep, err := Inspect(p, Options{Structure: true}); err == nil {
			add(rep)
		}
		return nil
	})
	if err != nil {
		return nil, &UnreadableError{fmt.Errorf("scan %s: %w", dir, err)}
	}
	// The directory itself may be a checkpoint directory.
	if len(t.entries) == 0 && detectDir(root) != "" {
		if rep, err := Inspect(root, Options{Structure: true}); err == nil {
			add(rep)
		}
	}
	refineSeries(t.entries)
	separateRuns(t.entries)
	sortEntries(t.entries)
	return t, nil
}

// notCheckpointDir says why a directory holding a file that checkpoint
// directories hold is not one ("" when it holds none).
func notCheckpointDir(dir string) string {
	switch {
	case fileExists(filepath.Join(dir, ".metadata")):
		return "has a .metadata file that is not a torch.distributed.checkpoint Metadata pickle, and no __N_M.distcp shards: not a checkpoint directory"
	case fileExists(filepath.Join(dir, "trainer_state.json")):
		return "has trainer_state.json but is not an HF Trainer checkpoint-N folder (it holds subdirectories): searched inside instead"
	}
	return ""
}

// sortEntries puts checkpoints and invalid candidates first, newest first,
// then the other entries by path.
func sortEntries(es []Entry) {
	var ck, other []Entry
	for _, e := range es {
		if e.Kind == KindOther {
			other = append(other, e)
		} else {
			ck = append(ck, e)
		}
	}
	SortNewestFirst(ck)
	sort.SliceStable(other, func(i, j int) bool { return other[i].Path < other[j].Path })
	copy(es, append(ck, other...))
}

// digitRun abstracts step numbers out of names for Series.
var digitRun = lazyre.New(`[0-9]+`)

// shardName matches the shards of a sharded model
// (model-00001-of-00004.safetensors, pytorch_model-00002-of-00003.bin).
var shardName = lazyre.New(`[0-9]+-of-[0-9]+`)

// SeriesOf is the series of a checkpoint path: its directory and its name
// with every run of digits replaced by "#".
func SeriesOf(path string) string {
	return filepath.Join(filepath.Dir(path), digitRun.ReplaceAllString(filepath.Base(path), "#"))
}

func entryOf(r *Report) Entry {
	e := Entry{Path: r.Path, Format: r.Format, Layout: r.Layout, Valid: r.Valid, Reason: r.Reason,
		ModTime: r.ModTime, Size: r.Size, Step: r.Step, Epoch: r.Epoch, Tensors: len(r.Tensors),
		Series: SeriesOf(r.Path), BestRefs: bestRefsOf(r.Scalars),
		EpochValue: r.EpochValue, Run: r.Run, Incomplete: r.Incomplete}
	e.Kind, e.Note = classify(r)
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

// classify says what a report is, by what it holds: a checkpoint, a broken
// checkpoint, or something else in a checkpoint format (and why).
func classify(r *Report) (kind, note string) {
	switch r.Format {
	case FormatDCP, FormatHFTrainer:
		// Recognised by their layout (detectDir).
		if !r.Valid {
			return KindInvalid, ""
		}
		return KindCheckpoint, ""
	case FormatLFSPointer:
		// What a clone without git-lfs leaves: the checkpoint is not
		// here. Under a checkpoint's name it is one that cannot be used.
		if lfsCheckpointName(r.Path) {
			return KindInvalid, ""
		}
		return KindOther, "a Git LFS pointer to a file not named as a checkpoint"
	case FormatTorchTar:
		// Pre-1.0 torch.save: tensors are not listed.
		if !r.Valid {
			return KindInvalid, ""
		}
		return KindCheckpoint, ""
	}
	// Content is visible when the pickle (or the safetensors header)
	// decoded, even if a storage record is missing or short.
	visible := len(r.Tensors) > 0 || len(r.Scalars) > 0 || r.Layout != ""
	if !r.Valid {
		if r.Format == FormatPickle {
			return KindOther, "a pickle that does not decode (" + r.Reason + "): not recognisable as a checkpoint"
		}
		if visible && !hasModelWeights(r) {
			return KindOther, noWeights(r) + "; also invalid: " + r.Reason
		}
		return KindInvalid, ""
	}
	if !hasModelWeights(r) {
		return KindOther, noWeights(r)
	}
	if shardName.MatchString(filepath.Base(r.Path)) {
		return KindOther, "one shard of a sharded model: shards are neither picked nor pruned one by one"
	}
	return KindCheckpoint, ""
}

// hasModelWeights reports whether a report holds model weights: a torch
// tensor of a floating-point or quantized dtype outside optimizer state.
func hasModelWeights(r *Report) bool {
	for _, t := range r.Tensors {
		if t.Role == "optimizer" || t.Storage == "numpy" {
			continue
		}
		if isFloat(t.DType) || strings.HasPrefix(t.DType, "qint") || strings.HasPrefix(t.DType, "quint") {
			return true
		}
	}
	return false
}

// noWeights describes a file in a checkpoint format without model weights.
func noWeights(r *Report) string {
	opt := 0
	for _, t := range r.Tensors {
		if t.Role == "optimizer" {
			opt++
		}
	}
	switch {
	case r.Layout == "optimizer" || (opt > 0 && opt == len(r.Tensors)):
		return "optimizer state only (no model weights)"
	case len(r.Tensors) == 0:
		return fmt.Sprintf("holds no tensors (%d scalars: a config, a vocabulary, arguments or other data)", len(r.Scalars))
	}
	return fmt.Sprintf("holds no model weights (%d tensors, none a floating-point model tensor)", len(r.Tensors))
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

// Latest scans dir (recursively, MaxScanDepth levels; a symlinked dir is
// followed) and returns the newest sound checkpoint (KindCheckpoint, and
// passing the full CRC check of its records: see confirmNewest) — by
// step or epoch when the checkpoints all carry it, else by modification
// time — and the invalid candidates that are newer than it (a torn save, a
// truncated copy), which a resume must not pick. best is nil when there is
// no sound checkpoint; skippedNewer then lists every invalid candidate, so
// best == nil with a non-empty skippedNewer means "checkpoints were saved
// here but none is usable" (FindLatest says so with Problem). Files that are
// not checkpoints (configs, vocabularies, optimizer state alone) are never
// picked and never listed as skipped. err only for an unreadable dir.
func Latest(dir string) (best *Entry, skippedNewer []Entry, err error) {
	res, err := FindLatest(dir)
	if err != nil {
		return nil, nil, err
	}
	return res.Best, res.SkippedNewer, nil
}

// LatestResult is what FindLatest found.
type LatestResult struct {
	// Dir is the directory as given; Resolved is it with symlinks resolved.
	Dir      string `json:"dir"`
	Resolved string `json:"resolved"`
	// Best is the newest sound checkpoint; nil when there is none.
	Best *Entry `json:"latest"`
	// SkippedNewer are the invalid candidates newer than Best (all of them
	// when Best is nil), newest first.
	SkippedNewer []Entry `json:"skipped_newer"`
	// Invalid are all the candidates that looked like checkpoints and failed
	// the structural check, newest first.
	Invalid []Entry `json:"invalid"`
	// NotCheckpoints are the files in a checkpoint format that were left
	// aside, each with its Note (a config, optimizer state alone...).
	NotCheckpoints []Entry `json:"not_checkpoints"`
	// Disagreement says why Best is not the newest by step: two runs'
	// checkpoints in one folder (Lightning's -vN after a restart).
	Disagreement string `json:"disagreement,omitempty"`
}

// NoValidCheckpointError is LatestResult.Problem's answer when a directory
// holds checkpoint candidates and none of them is sound.
type NoValidCheckpointError struct {
	Dir     string
	Invalid []Entry // newest first, each with its Reason
}

func (e *NoValidCheckpointError) Error() string {
	var b strings.Builder
	if n := e.LFSPointers(); n == len(e.Invalid) {
		fmt.Fprintf(&b, "no valid checkpoint in %s: ", e.Dir)
		if n == 1 {
			fmt.Fprintf(&b, "%s is a Git LFS pointer, not the checkpoint", e.Invalid[0].Path)
		} else {
			fmt.Fprintf(&b, "its %d checkpoints are Git LFS pointers, not the files", n)
		}
		b.WriteString(" (a clone without git-lfs): run `git lfs pull` in the repository")
		return b.String()
	}
	fmt.Fprintf(&b, "no valid checkpoint in %s: %d checkpoint", e.Dir, len(e.Invalid))
	if len(e.Invalid) != 1 {
		b.WriteString("s")
	}
	b.WriteString(" failed verification:")
	for i, x := range e.Invalid {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(e.Invalid)-5)
			break
		}
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s (%s)", x.Path, x.Reason)
	}
	return b.String()
}

// LFSPointers counts the invalid candidates that are Git LFS pointers.
func (e *NoValidCheckpointError) LFSPointers() int {
	n := 0
	for _, x := range e.Invalid {
		if x.Format == FormatLFSPointer {
			n++
		}
	}
	return n
}

// Problem returns a *NoValidCheckpointError when checkpoints were found but
// none is sound, so a resume would start from nothing; nil otherwise (a
// checkpoint was found, or the directory holds no checkpoint candidate at
// all, as on a first run).
func (r *LatestResult) Problem() error {
	if r.Best != nil || len(r.Invalid) == 0 {
		return nil
	}
	return &NoValidCheckpointError{Dir: r.Dir, Invalid: r.Invalid}
}

// FindLatest is Latest with everything it saw: the invalid candidates and
// the files it left aside. err only for an unreadable dir.
func FindLatest(dir string) (*LatestResult, error) {
	es, err := Scan(dir)
	if err != nil {
		return nil, err
	}
	confirmNewest(es, func(*Entry) string { return "" })
	res := pickLatest(es)
	res.Dir = dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		res.Resolved = r
	}
	return res, nil
}

func pickLatest(es []Entry) *LatestResult {
	res := &LatestResult{SkippedNewer: []Entry{}, Invalid: []Entry{}, NotCheckpoints: []Entry{}}
	var valid []Entry
	for _, e := range es {
		switch e.Kind {
		case KindCheckpoint:
			valid = append(valid, e)
		case KindInvalid:
			res.Invalid = append(res.Invalid, e)
		default:
			res.NotCheckpoints = append(res.NotCheckpoints, e)
		}
	}
	SortNewestFirst(res.Invalid)
	if len(valid) == 0 {
		res.SkippedNewer = append(res.SkippedNewer, res.Invalid...)
		return res
	}
	SortNewestFirst(valid)
	b := valid[0]
	res.Best = &b
	preferNewestLightningRun(valid, res)
	mixedRuns(valid, res)
	for _, e := range res.Invalid {
		if Newer(&e, &b) {
			res.SkippedNewer = append(res.SkippedNewer, e)
		}
	}
	return res
}
