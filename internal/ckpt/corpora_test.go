package ckpt

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// Real files from public repositories (../shared/corpora, SOURCES.md
// there), read in place.

// TestScanRunDirTextIsNoPickle: Lightning's hparams.yaml starts with
// "b" (BUILD) and its metrics.csv with "e" (APPENDS); CPython's unpickler
// refuses both at byte 0, so they are not pickles: skipped in a directory,
// not understood alone, never "pickle not read to its end".
func TestScanRunDirTextIsNoPickle(t *testing.T) {
	t.Parallel()
	dir := testbin.CorpusFile(t, "checkpoints/lightning-2.4-run/lightning_logs/version_0")
	results, err := ScanPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, r := range results {
		base := filepath.Base(r.Path)
		if base != "hparams.yaml" && base != "metrics.csv" {
			continue
		}
		seen++
		if r.Status != StatusSkipped || len(r.Errors) != 0 || !strings.Contains(r.Skipped, "refuse it at byte 0") {
			t.Errorf("%s in a directory: status %s, skipped %q, errors %q; want skipped, refused at byte 0", base, r.Status, r.Skipped, r.Errors)
		}
		alone, err := ScanFile(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		if alone.Status != StatusNotUnderstood || alone.Safe || alone.Pickles != 0 || len(alone.Errors) != 0 {
			t.Errorf("%s alone: status %s, safe %v, pickles %d, errors %q; want not-understood", base, alone.Status, alone.Safe, alone.Pickles, alone.Errors)
		}
	}
	if seen != 2 {
		t.Fatalf("saw %d of hparams.yaml and metrics.csv", seen)
	}
}

// TestLFSPointers: Git LFS pointer files under checkpoint names (what a
// clone without git-lfs leaves) are named as such, with the size the
// pointer gives and how to fetch the file, by inspect, verify, ls (Scan),
// latest (FindLatest, also run --resume-from's lookup), scan and prune.
func TestLFSPointers(t *testing.T) {
	t.Parallel()
	dir := testbin.CorpusFile(t, "checkpoints/lfs-pointers")
	for _, name := range []string{"training_args.bin", "pytorch_globals.bin"} {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var size int64 = -1
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "size "); ok {
				size, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if size <= 0 {
			t.Fatalf("%s: no size line", name)
		}
		rep, err := Verify(p, true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Valid || rep.Format != FormatLFSPointer || !strings.Contains(rep.Reason, "Git LFS pointer") ||
			!strings.Contains(rep.Reason, "git lfs pull") || !strings.Contains(rep.Reason, humanBytes(size)) {
			t.Errorf("%s: verify valid=%v format %q reason %q; want a Git LFS pointer of %s", name, rep.Valid, rep.Format, rep.Reason, humanBytes(size))
		}
		sr, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if sr.Safe || sr.Status != StatusNotUnderstood || len(sr.NotUnderstood) != 1 || !strings.Contains(sr.NotUnderstood[0], "git lfs pull") {
			t.Errorf("%s: scan %s %q", name, sr.Status, sr.NotUnderstood)
		}
	}
	// In a directory scan too: not skipped as text would be.
	srs, err := ScanPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range srs {
		if sr.Status != StatusNotUnderstood {
			t.Errorf("scan DIR: %s is %s", sr.Path, sr.Status)
		}
	}
	es, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("ls: %d entries, want the 2 pointers", len(es))
	}
	for _, e := range es {
		if e.Kind != KindInvalid || !strings.Contains(e.Reason, "git lfs pull") {
			t.Errorf("ls: %s kind %s reason %q", e.Path, e.Kind, e.Reason)
		}
	}
	res, err := FindLatest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best != nil || res.Problem() == nil || !strings.Contains(res.Problem().Error(), "Git LFS pointers") ||
		!strings.Contains(res.Problem().Error(), "git lfs pull") {
		t.Errorf("latest: best %v, problem %v", res.Best, res.Problem())
	}
	plan, err := PlanPrune(es, PrunePolicy{KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Items) != 0 || len(plan.LeftAlone) != 2 {
		t.Errorf("prune: %d items, %d left alone; want the pointers left alone", len(plan.Items), len(plan.LeftAlone))
	}
}
