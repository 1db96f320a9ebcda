package cli

import (
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestCkptLFSPointersCLI: the commands a user runs on a clone without
// git-lfs name the pointers and how to fetch the files.
func TestCkptLFSPointersCLI(t *testing.T) {
	dir := testbin.CorpusFile(t, "checkpoints/lfs-pointers")
	file := dir + "/training_args.bin"
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout+stderr
	}{
		{[]string{"ls", dir}, 0, "INVALID: a Git LFS pointer"},
		{[]string{"inspect", file}, 1, "a Git LFS pointer, not the file"},
		{[]string{"verify", file}, 1, "a Git LFS pointer, not the file"},
		{[]string{"scan", file}, 4, "a Git LFS pointer, not the file"},
		{[]string{"scan", dir}, 4, "git lfs pull"},
		{[]string{"latest", dir}, 1, "its 2 checkpoints are Git LFS pointers, not the files (a clone without git-lfs): run `git lfs pull`"},
	} {
		code, out, errOut := runCkpt(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.out) {
			t.Errorf("ckpt %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, tc.out, out, errOut)
		}
		if strings.Contains(out+errOut, "no pickle opcode") || strings.Contains(out+errOut, "no checkpoints") {
			t.Errorf("ckpt %s still says the old words:\n%s%s", strings.Join(tc.args, " "), out, errOut)
		}
	}
}

// TestCkptInspectJSONEveryCorpusFile: inspect --json of every real file
// (checkpoints, run directories, scanners' samples, snapshots) and of every
// HF checkpoint directory is valid JSON and never a usage or read error;
// no internal type name leaks into a path.
func TestCkptInspectJSONEveryCorpusFile(t *testing.T) {
	root := testbin.Corpora(t)
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), "checkpoint-") {
			paths = append(paths, p)
		}
		if d.Type().IsRegular() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 150 {
		t.Fatalf("only %d corpus paths", len(paths))
	}
	for _, p := range paths {
		code, out, errOut := runCkpt(t, "inspect", "--json", p)
		if code == 2 || !json.Valid([]byte(out)) {
			t.Errorf("inspect --json %s: exit %d, valid JSON %v; stderr %s", p, code, json.Valid([]byte(out)), errOut)
			continue
		}
		if strings.Contains(out, "<pickle.") {
			t.Errorf("inspect --json %s names an internal type: %s", p, out[strings.Index(out, "<pickle."):][:40])
		}
	}
}

// TestCkptJSONOverTheCorpus: ls, latest, prune (a dry run) and scan with
// --json over the whole corpus write valid JSON.
func TestCkptJSONOverTheCorpus(t *testing.T) {
	root := testbin.Corpora(t)
	ck := filepath.Join(root, "checkpoints")
	for _, args := range [][]string{
		{"ls", "--json", ck},
		{"latest", "--json", filepath.Join(ck, "hf-trainer-mixed-runs")},
		{"latest", "--json", filepath.Join(ck, "lightning-argparse")},
		{"prune", "--json", "--keep-last", "1", ck},
		{"scan", "--json", root},
	} {
		code, out, errOut := runCkpt(t, args...)
		if code == 2 || !json.Valid([]byte(out)) {
			t.Errorf("ckpt %s: exit %d, valid JSON %v; stderr %s", strings.Join(args, " "), code, json.Valid([]byte(out)), errOut)
		}
	}
}

// TestCkptInspectLightningCallbacks: ReduceLROnPlateau's mode_worse (inf)
// comes out as "inf", and Lightning 1.x's class-keyed callback states
// under each callback's class.
func TestCkptInspectLightningCallbacks(t *testing.T) {
	code, out, errOut := runCkpt(t, "inspect", "--json", testbin.CorpusFile(t, "checkpoints/lightning-argparse/DeepONet-RD-epoch=2953-val_loss=0.00.ckpt"))
	var rep struct {
		Scalars map[string]any `json:"scalars"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v; stderr %s", code, err, errOut)
	}
	if v := rep.Scalars["lr_schedulers.0.mode_worse"]; v != "inf" {
		t.Errorf("mode_worse = %#v, want \"inf\"", v)
	}
	code, out, errOut = runCkpt(t, "inspect", "--json", testbin.CorpusFile(t, "checkpoints/lightning-1.4/last.ckpt"))
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v; stderr %s", code, err, errOut)
	}
	for k, want := range map[string]any{
		"callbacks.pytorch_lightning.callbacks.early_stopping.EarlyStopping.patience":    10.0,
		"callbacks.pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint.monitor": "Val/Accuracy",
	} {
		if got := rep.Scalars[k]; got != want {
			t.Errorf("%s = %#v, want %#v", k, got, want)
		}
	}
}

// TestCkptHFMixedRunsCLI: ls shows HF's fractional epochs and the
// checkpoints a resume would find incomplete, and ls, latest and prune say
// the output directory mixes three runs; prune never deletes run C's last
// checkpoint for run B's higher steps.
func TestCkptHFMixedRunsCLI(t *testing.T) {
	dir := testbin.CorpusFile(t, "checkpoints/hf-trainer-mixed-runs/results")
	code, out, errOut := runCkpt(t, "ls", dir)
	if code != 0 || !strings.Contains(errOut, "mixes 3 training runs") {
		t.Errorf("ls: exit %d, stderr %s", code, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, "checkpoint-7500 "):
			if !strings.Contains(l, " 0.96 ") {
				t.Errorf("ls: epoch of checkpoint-7500 (0.956 in trainer_state.json) not 0.96: %s", l)
			}
		case strings.Contains(l, "checkpoint-872 "), strings.Contains(l, "checkpoint-500 "):
			if !strings.Contains(l, "incomplete for a resume: no optimizer.pt") {
				t.Errorf("ls: %s", l)
			}
		}
	}
	code, out, _ = runCkpt(t, "verify", dir+"/checkpoint-872")
	if code != 0 || !strings.Contains(out, "incomplete for a resume: no optimizer.pt") {
		t.Errorf("verify checkpoint-872: exit %d\n%s", code, out)
	}
	code, _, errOut = runCkpt(t, "latest", dir)
	if code != 0 || !strings.Contains(errOut, "mixes 3 training runs") {
		t.Errorf("latest: exit %d, stderr %s", code, errOut)
	}
	code, out, errOut = runCkpt(t, "prune", dir, "--keep-last", "1")
	if code != 0 || !strings.Contains(errOut, "each run is pruned on its own") || strings.Contains(out, "delete  "+dir+"/checkpoint-872") {
		t.Errorf("prune: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "keep    "+dir+"/checkpoint-872") {
		t.Errorf("prune does not keep checkpoint-872:\n%s", out)
	}
}
