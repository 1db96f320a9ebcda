package ckpt

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestPruneKeepsLinkTargets: best.pt and last.ckpt are links prune keeps
// (each its own series); their targets stay, so no kept link dangles.
func TestPruneKeepsLinkTargets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	for i, n := range []string{"ckpt-100.pt", "ckpt-200.pt", "ckpt-300.pt", "ckpt-400.pt"} {
		testbin.CopyFile(t, "testdata/torch/training.pt", filepath.Join(dir, n), t0.Add(time.Duration(i)*time.Hour))
	}
	mustSymlink(t, "ckpt-100.pt", filepath.Join(dir, "best.pt"))
	mustSymlink(t, filepath.Join(dir, "ckpt-300.pt"), filepath.Join(dir, "last.ckpt"))
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Deleted) != 1 || filepath.Base(plan.Deleted[0]) != "ckpt-200.pt" {
		t.Errorf("deleted %v, want ckpt-200.pt alone", plan.Deleted)
	}
	for _, l := range []string{"best.pt", "last.ckpt"} {
		if _, err := os.Stat(filepath.Join(dir, l)); err != nil {
			t.Errorf("%s dangles: %v", l, err)
		}
	}
	for _, it := range plan.Items {
		if filepath.Base(it.Path) == "ckpt-100.pt" && !strings.Contains(strings.Join(it.Why, ";"), "target of the kept link") {
			t.Errorf("ckpt-100.pt kept for %v", it.Why)
		}
	}
}

// TestPruneKeepsRecordedBest: Lightning's best_model_path and HF's
// best_model_checkpoint name an old checkpoint, which keep-last alone
// would delete.
func TestPruneKeepsRecordedBest(t *testing.T) {
	t.Parallel()
	// Lightning (scripts/gen-edge-fixtures.py): best is epoch=0-step=100.
	dir := t.TempDir()
	for _, n := range []string{"epoch=0-step=100.ckpt", "epoch=1-step=200.ckpt", "epoch=2-step=300.ckpt"} {
		testbin.CopyFile(t, filepath.Join("testdata/edges/lightning", n), filepath.Join(dir, n), time.Now())
	}
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Deleted) != 1 || filepath.Base(plan.Deleted[0]) != "epoch=1-step=200.ckpt" || !exists(filepath.Join(dir, "epoch=0-step=100.ckpt")) {
		t.Errorf("lightning: deleted %v", plan.Deleted)
	}
	// Asked to, the policy alone decides.
	plan, err = Prune(dir, PrunePolicy{KeepLast: 1, DeleteRecordedBest: true}, false)
	if err != nil || plan.FreedBytes == 0 {
		t.Errorf("--delete-recorded-best: %v %+v", err, plan)
	}
	// HF: three checkpoint-N folders; the newest records checkpoint-500 as best.
	out := t.TempDir()
	for _, n := range []int{500, 1000, 1500} {
		d := filepath.Join(out, "checkpoint-"+strconv.Itoa(n))
		copyDir(t, "testdata/torch/hf/checkpoint-500", d)
		st := `{"global_step": ` + strconv.Itoa(n) + `, "epoch": 2.0, "best_metric": 0.41, "best_model_checkpoint": "out/checkpoint-500", "log_history": []}`
		if err := os.WriteFile(filepath.Join(d, "trainer_state.json"), []byte(st), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plan, err = Prune(out, PrunePolicy{KeepLast: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Deleted) != 1 || filepath.Base(plan.Deleted[0]) != "checkpoint-1000" || !exists(filepath.Join(out, "checkpoint-500")) {
		t.Errorf("hf: deleted %v", plan.Deleted)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		testbin.CopyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), time.Now())
	}
}

// TestSeriesModelSizes: names that differ only in a model size are not
// one series, unless step or epoch inside prove it; counters are.
func TestSeriesModelSizes(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		names []string
		steps []*int64
		one   bool
	}{
		{[]string{"resnet18.pt", "resnet50.pt", "resnet101.pt"}, nil, false},
		{[]string{"llama-7b.pt", "llama-13b.pt"}, nil, false},
		{[]string{"gpt2-350m.pt", "gpt2-774m.pt"}, nil, false},
		{[]string{"efficientnet-b0.pt", "efficientnet-b3.pt"}, nil, false},
		{[]string{"resnet18.pt", "resnet50.pt"}, []*int64{i64(1), i64(1)}, false},
		{[]string{"resnet18.pt", "resnet50.pt"}, []*int64{i64(100), i64(200)}, true},
		{[]string{"ckpt-100.pt", "ckpt-200.pt"}, nil, true},
		{[]string{"model_epoch3.pt", "model_epoch4.pt"}, nil, true},
		{[]string{"epoch=0-step=100.ckpt", "epoch=1-step=200.ckpt"}, nil, true},
		{[]string{"step1000.pt", "step2000.pt"}, nil, true},
	}
	for _, tc := range tests {
		var es []Entry
		for i, n := range tc.names {
			e := Entry{Path: filepath.Join("/run", n), Series: SeriesOf(filepath.Join("/run", n)), Kind: KindCheckpoint}
			if tc.steps != nil {
				e.Step = tc.steps[i]
			}
			es = append(es, e)
		}
		refineSeries(es)
		one := true
		for _, e := range es {
			one = one && e.Series == es[0].Series
		}
		if one != tc.one {
			t.Errorf("%v (steps %v): one series %v, want %v", tc.names, tc.steps, one, tc.one)
		}
	}
	// On disk: prune --keep-last 1 deletes none of three model sizes.
	dir := t.TempDir()
	for i, n := range []string{"resnet18.pt", "resnet50.pt", "resnet101.pt"} {
		testbin.CopyFile(t, "testdata/torch/state_dict.pt", filepath.Join(dir, n), time.Now().Add(time.Duration(i)*time.Minute))
	}
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
	if err != nil || len(plan.Deleted) != 0 {
		t.Errorf("prune of model sizes: deleted %v, %v", plan.Deleted, err)
	}
}

// TestPrunePartWay: a deletion that fails after every check passed (the
// disk went read-only, a file changed under prune) names what was already
// deleted; a deletion that cannot happen (a directory prune may not
// write) stops prune before the first one.
func TestPrunePartWay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	for i, n := range []string{"ckpt-100.pt", "ckpt-200.pt", "ckpt-300.pt"} {
		testbin.CopyFile(t, "testdata/torch/training.pt", filepath.Join(dir, n), t0.Add(time.Duration(i)*time.Hour))
	}
	if os.Geteuid() != 0 { // root writes anywhere
		os.Chmod(dir, 0o555)
		_, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
		os.Chmod(dir, 0o755)
		if err == nil || !strings.Contains(err.Error(), "nothing deleted") || !exists(filepath.Join(dir, "ckpt-200.pt")) {
			t.Errorf("read-only dir: %v", err)
		}
	}
	// Deletions run newest first: ckpt-200.pt goes, ckpt-100.pt fails.
	failFor := filepath.Join(dir, "ckpt-100.pt")
	setRemoveFault(failFor, errors.New("input/output error"))
	defer setRemoveFault("", nil)
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
	var pe *PartialPruneError
	if !errors.As(err, &pe) || len(pe.Deleted) != 1 || plan == nil || len(plan.Deleted) != 1 ||
		!strings.Contains(err.Error(), "delete "+failFor+": input/output error; already deleted: "+filepath.Join(dir, "ckpt-200.pt")) {
		t.Fatalf("part-way: %v", err)
	}
	if exists(filepath.Join(dir, "ckpt-200.pt")) || !exists(failFor) {
		t.Error("the files on disk do not match the report")
	}
}

func TestDisplayPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"runs/ckpt-1.pt":       "runs/ckpt-1.pt",
		"runs/with space.pt":   "runs/with space.pt",
		"runs/é.pt":            "runs/é.pt",
		"a\nb.pt":              `"a\nb.pt"`,
		"a\x1b[2Jb.pt":         `"a\x1b[2Jb.pt"`,
		"a\tb.pt":              `"a\tb.pt"`,
		"bad\xffutf8.pt":       `"bad\xffutf8.pt"`,
		"c1\u009bcontrol.pt":   `"c1\u009bcontrol.pt"`,
		"rtl\u202eoverride.pt": `"rtl\u202eoverride.pt"`,
	} {
		if got := DisplayPath(in); got != want {
			t.Errorf("DisplayPath(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestLatestLightningRestart: Lightning restarted from scratch in the same
// folder writes -v1 files whose steps start again; latest takes the newest
// run's checkpoint and says the two runs disagree. A restart that resumed
// (steps go on) needs no word.
func TestLatestLightningRestart(t *testing.T) {
	t.Parallel()
	src := "testdata/edges/lightning/"
	t0 := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	// layout copies the files in the order the runs wrote them, an hour
	// apart, into one folder.
	layout := func(files [][2]string) string {
		dir := t.TempDir()
		for i, f := range files {
			testbin.CopyFile(t, src+f[1], filepath.Join(dir, f[0]), t0.Add(time.Duration(i)*time.Hour))
		}
		return dir
	}
	flat := layout([][2]string{{"epoch=0-step=100.ckpt", "epoch=0-step=100.ckpt"}, {"epoch=1-step=200.ckpt", "epoch=1-step=200.ckpt"},
		{"last.ckpt", "epoch=1-step=200.ckpt"}, {"epoch=0-step=100-v1.ckpt", "epoch=0-step=100.ckpt"}, {"last-v1.ckpt", "epoch=0-step=100.ckpt"}})
	res, err := FindLatest(flat)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best == nil || !strings.Contains(filepath.Base(res.Best.Path), "-v1") || !strings.Contains(res.Disagreement, "Lightning restarted") {
		t.Errorf("restart from scratch: latest %v, disagreement %q", res.Best, res.Disagreement)
	}
	resumed := layout([][2]string{{"epoch=0-step=100.ckpt", "epoch=0-step=100.ckpt"}, {"last.ckpt", "epoch=0-step=100.ckpt"},
		{"epoch=2-step=300-v1.ckpt", "epoch=2-step=300.ckpt"}, {"last-v1.ckpt", "epoch=2-step=300.ckpt"}})
	res, err = FindLatest(resumed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best == nil || *res.Best.Step != 300 || res.Disagreement != "" {
		t.Errorf("resumed restart: latest %+v, disagreement %q", res.Best, res.Disagreement)
	}
}
