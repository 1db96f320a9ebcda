package ckpt

import (
	"path/filepath"
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
