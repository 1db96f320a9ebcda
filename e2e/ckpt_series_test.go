package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// seriesRun is a training run's directory written by real torch
// (scripts/gen-ckpt-series.py): ckpt-{100,200,300}.pt (model, optimizer,
// step) among vocab.pkl, tokenizer.json, config.pt, training_args.bin,
// optimizer.pt (optimizer state alone, per-parameter step 400) and notes/
// (a text file named .metadata and a README).
const seriesRun = "../internal/ckpt/testdata/series/run"

// TestCkptSeriesLatestAndPrune: `ckpt latest` picks ckpt-300.pt, and
// `ckpt prune --keep-last 1 --apply` deletes ckpt-100.pt and ckpt-200.pt
// and leaves every other file byte for byte as it was, naming each one it
// left alone.
func TestCkptSeriesLatestAndPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := testbin.CopyRun(t, seriesRun)

	r := e.run("ckpt", "latest", dir)
	if r.code != 0 || r.stdout != filepath.Join(dir, "ckpt-300.pt")+"\n" {
		t.Fatalf("latest: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	before := testbin.HashTree(t, dir)
	r = e.run("ckpt", "prune", dir, "--keep-last", "1", "--apply", "--json")
	if r.code != 0 {
		t.Fatalf("prune: exit %d\n%s", r.code, r.stderr)
	}
	var plan struct {
		Deleted   []string `json:"deleted"`
		LeftAlone []struct {
			Path string `json:"path"`
			Why  string `json:"why"`
		} `json:"left_alone"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	sort.Strings(plan.Deleted)
	if strings.Join(plan.Deleted, " ") != filepath.Join(dir, "ckpt-100.pt")+" "+filepath.Join(dir, "ckpt-200.pt") {
		t.Errorf("deleted %v", plan.Deleted)
	}
	after := testbin.HashTree(t, dir)
	for rel, sum := range before {
		gone := rel == "ckpt-100.pt" || rel == "ckpt-200.pt"
		got, ok := after[rel]
		switch {
		case gone && ok:
			t.Errorf("%s survived --keep-last 1", rel)
		case !gone && !ok:
			t.Errorf("%s was deleted", rel)
		case !gone && got != sum:
			t.Errorf("%s changed", rel)
		}
	}
	left := map[string]bool{}
	for _, la := range plan.LeftAlone {
		rel, _ := filepath.Rel(dir, la.Path)
		left[rel] = la.Why != ""
	}
	for _, rel := range []string{"vocab.pkl", "config.pt", "training_args.bin", "optimizer.pt", "notes"} {
		if !left[rel] {
			t.Errorf("left_alone lacks %s (with a reason): %+v", rel, plan.LeftAlone)
		}
	}

	// Nothing older is left: a second pass deletes nothing.
	r = e.run("ckpt", "prune", dir, "--keep-last", "1", "--apply")
	if r.code != 0 || !strings.Contains(r.stdout, "LEFT ALONE") || strings.Contains(r.stdout, "deleted") {
		t.Errorf("second prune: exit %d\n%s", r.code, r.stdout)
	}
	if len(testbin.HashTree(t, dir)) != len(before)-2 {
		t.Error("the second prune deleted something")
	}
}

// TestCkptLatestSymlinkedDir: `ckpt latest` and `run --resume-from` follow
// a symlinked checkpoint directory: the job gets the newest checkpoint in
// $VRAMGUARD_RESUME, named under the link.
func TestCkptLatestSymlinkedDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := testbin.CopyRun(t, seriesRun)
	link := filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(link, "ckpt-300.pt")
	r := e.run("ckpt", "latest", link)
	if r.code != 0 || r.stdout != want+"\n" {
		t.Fatalf("latest via link: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = e.run("run", "--resume-from", link, "--", "bash", "-c", `printf '%s\n' "$VRAMGUARD_RESUME"`)
	if r.code != 0 || r.stdout != want+"\n" {
		t.Fatalf("run --resume-from link: exit %d stdout %q, want %q\nstderr:\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// TestCkptLatestAllInvalid: when every saved checkpoint is torn, `ckpt
// latest` exits 1 naming each with its reason, and never offers the config
// that sits next to them.
func TestCkptLatestAllInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := testbin.CopyRun(t, seriesRun)
	tearSeries(t, dir)
	r := e.run("ckpt", "latest", dir)
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("exit %d stdout %q, want 1 and nothing", r.code, r.stdout)
	}
	for _, s := range []string{"ckpt-100.pt", "ckpt-200.pt", "ckpt-300.pt", "3 saved, every one failed verification"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	for _, s := range []string{"config.pt", "optimizer.pt", "vocab.pkl"} {
		if strings.Contains(r.stderr, s) {
			t.Errorf("stderr names %s:\n%s", s, r.stderr)
		}
	}
}

// TestResumeFromNothingValidIsLoud: --resume-from a directory whose
// checkpoints are all torn starts the job from scratch, and says so on the
// terminal, in the events and in the post-mortem (issue #14 item 4).
func TestResumeFromNothingValidIsLoud(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := testbin.CopyRun(t, seriesRun)
	tearSeries(t, dir)
	r := e.run("run", "--resume-from", dir, "--", "sh", "-c", `echo "resume=[$VRAMGUARD_RESUME]"; exit 3`)
	if r.code != 3 || !strings.Contains(r.stdout, "resume=[]") {
		t.Fatalf("exit %d stdout %q", r.code, r.stdout)
	}
	if !strings.Contains(r.stderr, "WARNING: attempt 1 starts from scratch: no valid checkpoint in") || !strings.Contains(r.stderr, "ckpt-300.pt") {
		t.Errorf("no loud warning naming the torn checkpoints:\n%s", r.stderr)
	}
	d := e.explain("last")
	if !strings.Contains(strings.Join(strs(d["evidence"]), "\n"), "resume: the attempt started from scratch: no valid checkpoint") {
		t.Errorf("post-mortem evidence: %v", d["evidence"])
	}
	if eventKinds(d)["resume_none"] == 0 {
		t.Error("no resume_none event")
	}
}

// tearSeries cuts the end off every checkpoint of the series in dir, as a
// crash mid-save would.
func tearSeries(t *testing.T, dir string) {
	t.Helper()
	for _, n := range []string{"ckpt-100.pt", "ckpt-200.pt", "ckpt-300.pt"} {
		p := filepath.Join(dir, n)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b[:len(b)-200], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const edges = "../internal/ckpt/testdata/edges"

// TestCkptScanExitStatuses: the built binary's exit status for a clean
// numpy array, a payload in an object array, and a file in no format.
func TestCkptScanExitStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	blob := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(blob, []byte("\x00\x01 in no format"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, word string
		code       int
	}{
		{edges + "/benign_int.npy", "ok", 0},
		{edges + "/attack_deflated.npz", "DANGEROUS", 1},
		{blob, "NOT UNDERSTOOD", 4},
	} {
		r := e.run("ckpt", "scan", tc.path)
		if r.code != tc.code || !strings.HasPrefix(r.stdout, tc.word) {
			t.Errorf("scan %s: exit %d, stdout %q; want %d and %q", filepath.Base(tc.path), r.code, r.stdout, tc.code, tc.word)
		}
	}
}

// TestResumeFromEscapesName: run's "resumes from" line prints a checkpoint
// name holding an escape sequence quoted; the job still gets the exact
// path.
func TestResumeFromEscapesName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	name := "ckpt-1\x1b]0;owned\x07.pt"
	b, err := os.ReadFile("../internal/ckpt/testdata/torch/training.pt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.run("run", "--resume-from", dir, "--", "sh", "-c", `test -f "$VRAMGUARD_RESUME" && echo found`)
	if r.code != 0 || !strings.Contains(r.stdout, "found") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if strings.ContainsAny(r.stderr, "\x1b\x07") || !strings.Contains(r.stderr, `resumes from "`) {
		t.Errorf("resumes-from line not escaped:\n%q", r.stderr)
	}
}
