package ckpt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// hfCache lays out a Hugging Face hub cache: the snapshot's files are
// symlinks to ../../blobs/<sha>.
func hfCache(t *testing.T, weights string) (repo, snap string) {
	repo = filepath.Join(t.TempDir(), "models--org--model")
	t0 := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	testbin.CopyFile(t, weights, filepath.Join(repo, "blobs", "3f1c0ffee"), t0)
	os.WriteFile(filepath.Join(repo, "blobs", "9abc"), []byte(`{"model_type": "x"}`), 0o644)
	snap = filepath.Join(repo, "snapshots", "0123abcd")
	mustSymlink(t, "../../blobs/3f1c0ffee", filepath.Join(snap, "pytorch_model.bin"))
	mustSymlink(t, "../../blobs/9abc", filepath.Join(snap, "config.json"))
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123abcd"), 0o644)
	return repo, snap
}

func TestHFCacheSnapshotIsScanned(t *testing.T) {
	_, snap := hfCache(t, "testdata/malicious/torch_payload_badcrc.pt")
	res, err := ScanPath(snap)
	if err != nil {
		t.Fatal(err)
	}
	// config.json is named as skipped (no loader unpickles it).
	if len(res) != 2 || filepath.Base(res[0].Path) != "config.json" || res[0].Status != StatusSkipped ||
		filepath.Base(res[1].Path) != "pytorch_model.bin" || res[1].Dangerous == 0 {
		t.Fatalf("scan of the snapshot: %+v", res)
	}
	_, snap = hfCache(t, "testdata/torch/state_dict.pt")
	res, err = ScanPath(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[1].Dangerous != 0 || res[1].Pickles != 1 {
		t.Fatalf("scan of a benign snapshot: %+v", res)
	}
}

func TestHFCacheSnapshotLsLatestVerify(t *testing.T) {
	_, snap := hfCache(t, "testdata/torch/state_dict.pt")
	es, err := Scan(snap)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range es {
		if filepath.Base(e.Path) == "pytorch_model.bin" && e.Valid {
			found = true
		}
	}
	if !found {
		t.Fatalf("ls of the snapshot: %+v", es)
	}
	best, _, err := Latest(snap)
	if err != nil || best == nil || filepath.Base(best.Path) != "pytorch_model.bin" {
		t.Fatalf("latest: %+v %v", best, err)
	}
	rep, err := Verify(filepath.Join(snap, "pytorch_model.bin"), true)
	if err != nil || !rep.Valid {
		t.Fatalf("verify through the link: %+v %v", rep, err)
	}
}

// A run directory whose checkpoint folder is a symlink to another disk.
func TestSymlinkedCheckpointDir(t *testing.T) {
	run := t.TempDir()
	store := t.TempDir()
	t0 := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	testbin.CopyFile(t, "testdata/torch/training.pt", filepath.Join(store, "epoch7.pt"), t0)
	mustSymlink(t, store, filepath.Join(run, "ckpts"))
	es, err := Scan(run)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) == 0 || es[0].Path != filepath.Join(run, "ckpts", "epoch7.pt") {
		t.Fatalf("ls: %+v", es)
	}
	res, err := ScanPath(run)
	if err != nil || len(res) != 1 {
		t.Fatalf("scan: %+v %v", res, err)
	}
}

// Links back to an ancestor, to itself and between two directories end;
// every file is still reached once per path that does not loop.
func TestWalkFollowLoops(t *testing.T) {
	dir := t.TempDir()
	testbin.CopyFile(t, "testdata/torch/state_dict.pt", filepath.Join(dir, "a", "m.pt"), time.Now())
	mustSymlink(t, "..", filepath.Join(dir, "a", "up"))
	mustSymlink(t, ".", filepath.Join(dir, "a", "self"))
	mustSymlink(t, "../b", filepath.Join(dir, "a", "tob"))
	mustSymlink(t, "../a", filepath.Join(dir, "b", "toa"))
	mustSymlink(t, "missing", filepath.Join(dir, "a", "dangling"))
	var paths []string
	err := walkFollow(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(paths, " ") != "a/m.pt" {
		t.Fatalf("files: %q", paths)
	}
	res, err := ScanPath(dir)
	if err != nil || len(res) != 1 {
		t.Fatalf("scan: %+v %v", res, err)
	}
	if _, err := Scan(dir); err != nil {
		t.Fatal(err)
	}
}

// prune never deletes a file that a symlinked directory puts under DIR but
// that lives elsewhere.
func TestPruneRefusesThroughSymlinkedDir(t *testing.T) {
	run := t.TempDir()
	store := t.TempDir()
	t0 := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	testbin.CopyFile(t, "testdata/torch/training.pt", filepath.Join(store, "ckpt-100.pt"), t0)
	testbin.CopyFile(t, "testdata/torch/training.pt", filepath.Join(store, "ckpt-200.pt"), t0.Add(time.Hour))
	mustSymlink(t, store, filepath.Join(run, "ckpts"))
	plan, err := Prune(run, PrunePolicy{KeepLast: 1}, true)
	if err == nil {
		t.Fatalf("prune through a symlinked directory deleted %v", plan.Deleted)
	}
	for _, n := range []string{"ckpt-100.pt", "ckpt-200.pt"} {
		if _, err := os.Stat(filepath.Join(store, n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
