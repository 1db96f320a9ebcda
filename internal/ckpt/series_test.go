package ckpt

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// seriesRun is testdata/series/run, written by scripts/gen-ckpt-series.py
// with real torch: ckpt-{100,200,300}.pt among a vocabulary, a config, HF
// training arguments, an optimizer state_dict alone, a tokenizer and a
// notes/ folder holding a text file named .metadata.
const seriesRun = "testdata/series/run"

type seriesExpect struct {
	TorchLoad    bool   `json:"torch_load"`
	ModelWeights bool   `json:"model_weights"`
	Step         *int64 `json:"step"`
	Epoch        *int64 `json:"epoch"`
}

func loadSeriesExpected(t *testing.T) map[string]seriesExpect {
	t.Helper()
	b, err := os.ReadFile("testdata/series/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]seriesExpect{}
	for k, v := range raw {
		if k == "latest" {
			continue
		}
		var e seriesExpect
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatal(err)
		}
		out[k] = e
	}
	return out
}

// scanByPath scans dir and returns its entries by their path below dir.
func scanByPath(t *testing.T, dir string) map[string]Entry {
	t.Helper()
	es, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Entry{}
	for _, e := range es {
		rel, _ := filepath.Rel(dir, e.Path)
		out[rel] = e
	}
	return out
}

// TestSeriesClassification: Scan takes exactly the files in which torch.load
// finds model weights for checkpoints, reads step and epoch from the top
// level only, and leaves JSON, text and the notes/ folder out.
func TestSeriesClassification(t *testing.T) {
	want := loadSeriesExpected(t)
	got := scanByPath(t, seriesRun)
	for name, w := range want {
		e, ok := got[name]
		if !w.TorchLoad {
			if ok {
				t.Errorf("%s: listed as %s, but it is no checkpoint format", name, e.Kind)
			}
			continue
		}
		if !ok {
			t.Errorf("%s: not listed", name)
			continue
		}
		wantKind := KindOther
		if w.ModelWeights {
			wantKind = KindCheckpoint
		}
		if e.Kind != wantKind {
			t.Errorf("%s: kind %s (%s), want %s", name, e.Kind, e.Note, wantKind)
		}
		if e.Kind == KindOther && e.Note == "" {
			t.Errorf("%s: left aside without a note", name)
		}
		if fmtInt(e.Step) != fmtInt(w.Step) || fmtInt(e.Epoch) != fmtInt(w.Epoch) {
			t.Errorf("%s: step %s epoch %s, torch sees %s %s at the top level", name, fmtInt(e.Step), fmtInt(e.Epoch), fmtInt(w.Step), fmtInt(w.Epoch))
		}
		if e.Kind == KindCheckpoint && e.Series != filepath.Join(seriesRun, "ckpt-#.pt") {
			t.Errorf("%s: series %q", name, e.Series)
		}
	}
	loadable := 0
	for _, w := range want {
		if w.TorchLoad {
			loadable++
		}
	}
	if len(got) != loadable || loadable != 7 {
		t.Errorf("Scan listed %d entries, want the %d files torch can load (7): %v", len(got), loadable, sortedKeys(got))
	}
	if !strings.Contains(got["optimizer.pt"].Note, "optimizer state only") {
		t.Errorf("optimizer.pt note = %q", got["optimizer.pt"].Note)
	}
}

func fmtInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

// TestSeriesLatest: the newest model checkpoint is picked, not the config
// (nested schedule.step 5000, "epochs"), the vocabulary (top-level words
// "step" and "epoch"), the optimizer alone (per-parameter step 400) or
// whatever was written last.
func TestSeriesLatest(t *testing.T) {
	dir := testbin.CopyRun(t, seriesRun)
	res, err := FindLatest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best == nil || filepath.Base(res.Best.Path) != "ckpt-300.pt" {
		t.Fatalf("latest = %+v, want ckpt-300.pt", res.Best)
	}
	if *res.Best.Step != 300 {
		t.Errorf("step = %d", *res.Best.Step)
	}
	if len(res.SkippedNewer) != 0 || len(res.Invalid) != 0 || res.Problem() != nil {
		t.Errorf("skipped %v invalid %v problem %v", res.SkippedNewer, res.Invalid, res.Problem())
	}
	var aside []string
	for _, e := range res.NotCheckpoints {
		aside = append(aside, filepath.Base(e.Path))
	}
	sort.Strings(aside)
	if strings.Join(aside, " ") != "config.pt optimizer.pt training_args.bin vocab.pkl" {
		t.Errorf("not checkpoints = %v", aside)
	}
}

// TestSeriesPruneApply: --keep-last 1 --apply deletes ckpt-100.pt and
// ckpt-200.pt and nothing else: every other file is the same byte for byte,
// and the plan says what it left alone and why.
func TestSeriesPruneApply(t *testing.T) {
	dir := testbin.CopyRun(t, seriesRun)
	before := testbin.HashTree(t, dir)
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	after := testbin.HashTree(t, dir)
	deleted := map[string]bool{"ckpt-100.pt": true, "ckpt-200.pt": true}
	for rel, sum := range before {
		got, ok := after[rel]
		switch {
		case deleted[rel] && ok:
			t.Errorf("%s survived", rel)
		case !deleted[rel] && !ok:
			t.Errorf("%s was deleted", rel)
		case !deleted[rel] && got != sum:
			t.Errorf("%s changed", rel)
		}
	}
	if len(after) != len(before)-2 {
		t.Errorf("%d files after, %d before", len(after), len(before))
	}
	var gotDeleted []string
	for _, p := range plan.Deleted {
		gotDeleted = append(gotDeleted, filepath.Base(p))
	}
	sort.Strings(gotDeleted)
	if strings.Join(gotDeleted, " ") != "ckpt-100.pt ckpt-200.pt" {
		t.Errorf("deleted = %v", gotDeleted)
	}
	why := map[string]string{}
	for _, la := range plan.LeftAlone {
		rel, _ := filepath.Rel(dir, la.Path)
		why[rel] = la.Why
	}
	for _, rel := range []string{"config.pt", "optimizer.pt", "training_args.bin", "vocab.pkl", "notes"} {
		if why[rel] == "" {
			t.Errorf("left alone lacks %s: %v", rel, why)
		}
	}
	if !strings.Contains(why["notes"], ".metadata") {
		t.Errorf("notes: %q", why["notes"])
	}
	if plan.OtherFiles != 3 { // tokenizer.json, notes/.metadata, notes/README.txt
		t.Errorf("other files = %d, want 3", plan.OtherFiles)
	}
}

// TestLatestSymlinkRoot: Scan, Latest and Prune follow a symlinked
// directory and name what they find under the link.
func TestLatestSymlinkRoot(t *testing.T) {
	dir := testbin.CopyRun(t, seriesRun)
	link := filepath.Join(t.TempDir(), "latest-run")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	res, err := FindLatest(link)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best == nil || res.Best.Path != filepath.Join(link, "ckpt-300.pt") {
		t.Fatalf("latest via link = %+v", res.Best)
	}
	if res.Resolved != dir {
		t.Errorf("resolved = %q, want %q", res.Resolved, dir)
	}
	plan, err := Prune(link, PrunePolicy{KeepLast: 2}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Deleted) != 1 || plan.Deleted[0] != filepath.Join(link, "ckpt-100.pt") {
		t.Fatalf("deleted via link = %v", plan.Deleted)
	}
	if _, err := os.Stat(filepath.Join(dir, "ckpt-100.pt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ckpt-100.pt still in the target: %v", err)
	}
}

// TestLatestNoneValid: torn saves and no sound checkpoint is a Problem that
// names every torn file; a directory with no checkpoint at all is not.
func TestLatestNoneValid(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, name := range []string{"ckpt-100.pt", "ckpt-200.pt"} {
		b, err := os.ReadFile(filepath.Join(seriesRun, name))
		if err != nil {
			t.Fatal(err)
		}
		writeAt(t, filepath.Join(dir, name), b[:len(b)/2], t0.Add(time.Duration(i)*time.Minute))
	}
	cfg, _ := os.ReadFile(filepath.Join(seriesRun, "config.pt"))
	writeAt(t, filepath.Join(dir, "config.pt"), cfg, t0.Add(time.Hour))
	res, err := FindLatest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best != nil {
		t.Fatalf("picked %s", res.Best.Path)
	}
	if len(res.Invalid) != 2 || len(res.SkippedNewer) != 2 || len(res.NotCheckpoints) != 1 {
		t.Fatalf("invalid %v skipped %v aside %v", res.Invalid, res.SkippedNewer, res.NotCheckpoints)
	}
	var nv *NoValidCheckpointError
	if p := res.Problem(); !errors.As(p, &nv) || len(nv.Invalid) != 2 {
		t.Fatalf("problem = %v", p)
	}
	msg := res.Problem().Error()
	for _, s := range []string{"ckpt-100.pt", "ckpt-200.pt", "2 checkpoints failed verification", "truncated"} {
		if !strings.Contains(msg, s) {
			t.Errorf("problem %q lacks %q", msg, s)
		}
	}
	best, skipped, err := Latest(dir)
	if err != nil || best != nil || len(skipped) != 2 {
		t.Errorf("Latest = %v %v %v", best, skipped, err)
	}
	// Only non-checkpoints: nothing to resume from, and nothing wrong.
	os.Remove(filepath.Join(dir, "ckpt-100.pt"))
	os.Remove(filepath.Join(dir, "ckpt-200.pt"))
	res, err = FindLatest(dir)
	if err != nil || res.Best != nil || res.Problem() != nil || len(res.SkippedNewer) != 0 {
		t.Errorf("config only: %+v %v", res, err)
	}
}

// TestDetectDirByContent: a .metadata file or trainer_state.json alone does
// not make a directory a checkpoint.
func TestDetectDirByContent(t *testing.T) {
	dir := t.TempDir()
	dcp, err := os.ReadFile("testdata/torch/dcp/step-300/.metadata")
	if err != nil {
		t.Fatal(err)
	}
	vocab, _ := os.ReadFile(filepath.Join(seriesRun, "vocab.pkl"))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	files := map[string][]byte{
		"text/.metadata":                          []byte("owner: me\n"),
		"pickled/.metadata":                       vocab, // a pickle, not a DCP Metadata object
		"realmeta/.metadata":                      dcp,   // DCP metadata whose shard is missing
		"torn/__0_0.distcp":                       []byte("partial"),
		"hfout/trainer_state.json":                []byte(`{"global_step": 200}`),
		"hfout/checkpoint-200/trainer_state.json": []byte(`{"global_step": 200}`),
		"flat/trainer_state.json":                 []byte(`{"global_step": 7}`),
	}
	for p, b := range files {
		writeAt(t, filepath.Join(dir, p), b, t0)
	}
	for sub, want := range map[string]string{
		"text": "", "pickled": "", "realmeta": FormatDCP, "torn": FormatDCP,
		"hfout": "", "hfout/checkpoint-200": FormatHFTrainer, "flat": FormatHFTrainer,
	} {
		if got := detectDir(filepath.Join(dir, sub)); got != want {
			t.Errorf("detectDir(%s) = %q, want %q", sub, got, want)
		}
	}
	kinds := map[string]string{}
	for rel, e := range scanByPath(t, dir) {
		kinds[rel] = e.Kind
	}
	if kinds["pickled/.metadata"] != KindOther || kinds["realmeta"] != KindInvalid || kinds["torn"] != KindInvalid {
		t.Errorf("kinds = %v", kinds)
	}
	if _, ok := kinds["hfout"]; ok {
		t.Errorf("the Trainer output dir was taken for one checkpoint: %v", kinds)
	}
	if kinds["hfout/checkpoint-200"] != KindCheckpoint || kinds["flat"] != KindCheckpoint {
		t.Errorf("HF checkpoint folders: %v", kinds)
	}
}

// TestPruneSeriesApart: a checkpoint is deleted only in favour of newer ones
// of its own series; shards of a sharded model are never pruned.
func TestPruneSeriesApart(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := safetensorsBytes(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8))
	files := []struct {
		name string
		data []byte
	}{
		{"ckpt-1.pt", torchZipBytes(t, "a", 1)},
		{"ckpt-2.pt", torchZipBytes(t, "a", 2)},
		{"best.pt", torchZipBytes(t, "b", 1)},       // its own series: kept, though older by step
		{"ema-5.pt", torchZipBytes(t, "c", 5)},      // another series
		{"ema-6.pt", torchZipBytes(t, "c", 6)},      //
		{"model-00001-of-00002.safetensors", st},    // shards
		{"model-00002-of-00002.safetensors", st},    //
		{"sub/ckpt-3.pt", torchZipBytes(t, "d", 3)}, // same name, other directory: other series
	}
	for i, f := range files {
		writeAt(t, filepath.Join(dir, f.name), f.data, t0.Add(time.Duration(i)*time.Minute))
	}
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	var del []string
	for _, p := range plan.Deleted {
		rel, _ := filepath.Rel(dir, p)
		del = append(del, rel)
	}
	sort.Strings(del)
	if strings.Join(del, " ") != "ckpt-1.pt ema-5.pt" {
		t.Errorf("deleted %v, want ckpt-1.pt ema-5.pt", del)
	}
	shards := 0
	for _, la := range plan.LeftAlone {
		if strings.Contains(la.Why, "shard") {
			shards++
		}
	}
	if shards != 2 {
		t.Errorf("left alone = %+v", plan.LeftAlone)
	}
}

func TestSeriesOf(t *testing.T) {
	for in, want := range map[string]string{
		"/r/ckpt-100.pt":            "/r/ckpt-#.pt",
		"/r/epoch=3-step=1000.ckpt": "/r/epoch=#-step=#.ckpt",
		"/r/checkpoint-500":         "/r/checkpoint-#",
		"/r/last.ckpt":              "/r/last.ckpt",
		"/r/run2/ckpt-100.pt":       "/r/run2/ckpt-#.pt",
	} {
		if got := SeriesOf(in); got != want {
			t.Errorf("SeriesOf(%s) = %s, want %s", in, got, want)
		}
	}
}
