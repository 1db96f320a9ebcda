package ckpt

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// hfMixed is a real HF Trainer output directory holding three runs
// (trainer_state.json max_steps 872, 1743 and 7843).
const hfMixed = "checkpoints/hf-trainer-mixed-runs/results"

// TestHFMixedRuns: the runs are told apart (each checkpoint's run
// identity), ls and prune say the directory mixes runs, prune keeps each
// run's newest (checkpoint-872, run C's last, is never deleted for run B's
// higher steps), epochs are the fractions trainer_state.json records, and
// a checkpoint without optimizer.pt is named incomplete for a resume.
func TestHFMixedRuns(t *testing.T) {
	t.Parallel()
	dir := testbin.CorpusFile(t, hfMixed)
	es, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 6 {
		t.Fatalf("%d entries, want 6", len(es))
	}
	groups := map[string][]string{}
	for _, e := range es {
		name := filepath.Base(e.Path)
		groups[e.Run] = append(groups[e.Run], name)
		// What trainer_state.json says, read here on its own.
		var st struct {
			Epoch    float64 `json:"epoch"`
			MaxSteps int64   `json:"max_steps"`
		}
		b, err := os.ReadFile(filepath.Join(e.Path, "trainer_state.json"))
		if err != nil || json.Unmarshal(b, &st) != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if e.EpochValue == nil || *e.EpochValue != st.Epoch {
			t.Errorf("%s: epoch %v, trainer_state.json says %v", name, e.EpochValue, st.Epoch)
		}
		rep, err := Inspect(e.Path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Scalars["epoch"] != st.Epoch {
			t.Errorf("%s: scalar epoch %v, trainer_state.json says %v", name, rep.Scalars["epoch"], st.Epoch)
		}
		if !strings.Contains(e.Run, "max_steps "+itoa(st.MaxSteps)) {
			t.Errorf("%s: run %q lacks max_steps %d", name, e.Run, st.MaxSteps)
		}
		_, statErr := os.Stat(filepath.Join(e.Path, "optimizer.pt"))
		if (e.Incomplete != "") != os.IsNotExist(statErr) || (e.Incomplete != "" && !strings.Contains(e.Incomplete, "no optimizer.pt")) {
			t.Errorf("%s: incomplete %q, optimizer.pt: %v", name, e.Incomplete, statErr)
		}
	}
	var got []string
	for _, names := range groups {
		sort.Strings(names)
		got = append(got, strings.Join(names, " "))
	}
	sort.Strings(got)
	if want := "checkpoint-1000 checkpoint-1500|checkpoint-500 checkpoint-872|checkpoint-7000 checkpoint-7500"; strings.Join(got, "|") != want {
		t.Errorf("runs %q, want %q", got, want)
	}
	if m := MixedRuns(es); len(m) != 1 || !strings.Contains(m[0], "mixes 3 training runs") || !strings.Contains(m[0], "max_steps 872") {
		t.Errorf("MixedRuns: %q", m)
	}
	plan, err := PlanPrune(es, PrunePolicy{KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	var kept, deleted []string
	for _, it := range plan.Items {
		if it.Keep {
			kept = append(kept, filepath.Base(it.Path))
		} else {
			deleted = append(deleted, filepath.Base(it.Path))
		}
	}
	sort.Strings(kept)
	sort.Strings(deleted)
	if strings.Join(kept, " ") != "checkpoint-1500 checkpoint-7500 checkpoint-872" || strings.Join(deleted, " ") != "checkpoint-1000 checkpoint-500 checkpoint-7000" {
		t.Errorf("prune --keep-last 1 keeps %v, deletes %v", kept, deleted)
	}
	if len(plan.MixedRuns) != 1 {
		t.Errorf("prune does not say the directory mixes runs")
	}
}

// TestHFMixedRunsLatest: latest takes the newest checkpoint of the run
// written last, whatever the other runs' steps, and says the directory
// mixes runs. The corpus is copied with modification times that put the
// runs in each order.
func TestHFMixedRunsLatest(t *testing.T) {
	t.Parallel()
	src := testbin.CorpusFile(t, hfMixed)
	runs := map[string][]string{"A": {"checkpoint-1000", "checkpoint-1500"}, "B": {"checkpoint-7000", "checkpoint-7500"}, "C": {"checkpoint-500", "checkpoint-872"}}
	for _, tc := range []struct {
		order []string // oldest first
		want  string
	}{
		{[]string{"A", "B", "C"}, "checkpoint-872"},
		{[]string{"C", "A", "B"}, "checkpoint-7500"},
		{[]string{"B", "C", "A"}, "checkpoint-1500"},
	} {
		dir := t.TempDir()
		t0 := time.Date(2024, 10, 1, 0, 0, 0, 0, time.UTC)
		for i, r := range tc.order {
			for j, name := range runs[r] {
				copyDirAt(t, filepath.Join(src, name), filepath.Join(dir, name), t0.Add(time.Duration(i*10+j)*time.Hour))
			}
		}
		res, err := FindLatest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if res.Best == nil || filepath.Base(res.Best.Path) != tc.want || !strings.Contains(res.Disagreement, "mixes 3 training runs") {
			t.Errorf("runs written %v: latest %v, disagreement %q; want %s", tc.order, res.Best, res.Disagreement, tc.want)
		}
	}
}

// TestSafetensorsHeaderOverLimit: a header longer than the format's
// 100 MiB limit (the whole of it in the file) is over the limit, as
// safetensors says (HeaderTooLarge), not a file in no format or truncated.
func TestSafetensorsHeaderOverLimit(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "model.safetensors")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(maxSafetensorsHeader + 1<<20)
	var lb [8]byte
	for i := range lb {
		lb[i] = byte(n >> (8 * i))
	}
	f.Write(lb[:])
	f.Write([]byte(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`))
	f.Truncate(int64(8 + n + 4)) // sparse: padding nobody reads
	f.Close()
	rep, err := Verify(p, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Valid || rep.Format != FormatSafetensors || !strings.Contains(rep.Reason, "over the format's limit") || strings.Contains(rep.Reason, "truncated ") {
		t.Errorf("format %q reason %q", rep.Format, rep.Reason)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func copyDirAt(t *testing.T, src, dst string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
		os.Chtimes(filepath.Join(dst, e.Name()), mtime, mtime)
	}
	os.Chtimes(dst, mtime, mtime)
}

// TestPruneKeepsWindowsRecordedBest: Lightning 2.4 trained on Windows
// records best_model_path as E:\...\checkpoints\epoch=98-step=6039.ckpt;
// prune keeps that checkpoint when a newer one of its series would
// otherwise see it deleted.
func TestPruneKeepsWindowsRecordedBest(t *testing.T) {
	t.Parallel()
	src := testbin.CorpusFile(t, "checkpoints/lightning-2.4-run/lightning_logs/version_0/checkpoints")
	dir := t.TempDir()
	t0 := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	for i, c := range [][2]string{{"epoch=84-step=5185.ckpt", "epoch=84-step=5185.ckpt"}, {"epoch=98-step=6039.ckpt", "epoch=98-step=6039.ckpt"},
		{"last.ckpt", "epoch=100-step=6100.ckpt"}} {
		copyFileAt(t, filepath.Join(src, c[0]), filepath.Join(dir, c[1]), t0.Add(time.Duration(i)*time.Hour))
	}
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range plan.Items {
		name := filepath.Base(it.Path)
		recorded := strings.Contains(strings.Join(it.Why, ";"), "recorded as the best checkpoint")
		switch name {
		case "epoch=98-step=6039.ckpt":
			if !it.Keep || !recorded {
				t.Errorf("%s: keep %v why %q; want kept as recorded best", name, it.Keep, it.Why)
			}
		case "epoch=84-step=5185.ckpt":
			if it.Keep {
				t.Errorf("%s kept: %q", name, it.Why)
			}
		}
	}
}

func copyFileAt(t *testing.T, src, dst string, mtime time.Time) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(dst, mtime, mtime)
}

// TestHFOneRunBeforeItsFirstLog: a checkpoint saved before the run's first
// log entry (empty log_history) is of the same run as the later ones, not
// a run of its own.
func TestHFOneRunBeforeItsFirstLog(t *testing.T) {
	t.Parallel()
	src := testbin.CorpusFile(t, hfMixed)
	dir := t.TempDir()
	t0 := time.Date(2024, 10, 1, 0, 0, 0, 0, time.UTC)
	copyDirAt(t, filepath.Join(src, "checkpoint-1000"), filepath.Join(dir, "checkpoint-1000"), t0)
	copyDirAt(t, filepath.Join(src, "checkpoint-1500"), filepath.Join(dir, "checkpoint-1500"), t0.Add(time.Hour))
	p := filepath.Join(dir, "checkpoint-1000", "trainer_state.json")
	var st map[string]any
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	st["log_history"] = []any{}
	b, _ = json.Marshal(st)
	os.WriteFile(p, b, 0o644)
	es, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Run != es[1].Run || es[0].Series != es[1].Series || len(MixedRuns(es)) != 0 {
		t.Errorf("runs %q / %q, series %q / %q, mixed %q", es[0].Run, es[1].Run, es[0].Series, es[1].Series, MixedRuns(es))
	}
	res, err := FindLatest(dir)
	if err != nil || res.Best == nil || filepath.Base(res.Best.Path) != "checkpoint-1500" || res.Disagreement != "" {
		t.Errorf("latest %+v, %v", res, err)
	}
}
