package ckpt

import (
	"archive/zip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// damageStorage copies a torch zip to dst with one byte of its first
// storage record flipped: the structure is intact, the record's CRC is not.
func damageStorage(t *testing.T, src, dst string, mtime time.Time) {
	t.Helper()
	testbin.CopyFile(t, src, dst, mtime)
	zr, err := zip.OpenReader(dst)
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	for _, f := range zr.File {
		if strings.Contains(f.Name, "/data/") && f.UncompressedSize64 > 8 {
			off, err = f.DataOffset()
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	zr.Close()
	if off < 0 {
		t.Fatalf("%s has no storage record", src)
	}
	f, err := os.OpenFile(dst, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	f.ReadAt(b[:], off+3)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off+3); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(dst, mtime, mtime)
}

// damagedRun: ckpt-100.pt sound, the newer ckpt-200.pt with a damaged
// storage (the structural check passes it).
func damagedRun(t *testing.T) string {
	dir := t.TempDir()
	t0 := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	testbin.CopyFile(t, "testdata/torch/training.pt", filepath.Join(dir, "ckpt-100.pt"), t0)
	damageStorage(t, "testdata/torch/training.pt", filepath.Join(dir, "ckpt-200.pt"), t0.Add(time.Hour))
	return dir
}

// TestLatestSkipsDamagedRecords: the newest checkpoint's records fail the
// full CRC check, so latest picks the one before it and says why.
// (TestDamagedLoadsUnderTorch shows torch.load takes the damaged file
// without a word.)
func TestLatestSkipsDamagedRecords(t *testing.T) {
	t.Parallel()
	dir := damagedRun(t)
	if rep, err := Inspect(filepath.Join(dir, "ckpt-200.pt"), Options{Structure: true}); err != nil || !rep.Valid {
		t.Fatalf("the damaged file must pass the structural check, or this test proves nothing: %v %+v", err, rep)
	}
	res, err := FindLatest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best == nil || filepath.Base(res.Best.Path) != "ckpt-100.pt" {
		t.Fatalf("latest: %+v", res.Best)
	}
	if len(res.SkippedNewer) != 1 || filepath.Base(res.SkippedNewer[0].Path) != "ckpt-200.pt" ||
		!strings.Contains(res.SkippedNewer[0].Reason, "CRC") {
		t.Errorf("skipped: %+v", res.SkippedNewer)
	}
}

// TestPruneNeverKeepsOnlyDamaged: with the newest checkpoint damaged,
// prune --keep-last 1 keeps the sound one before it (and the damaged one,
// as newer than the newest valid).
func TestPruneNeverKeepsOnlyDamaged(t *testing.T) {
	t.Parallel()
	dir := damagedRun(t)
	plan, err := Prune(dir, PrunePolicy{KeepLast: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Deleted) != 0 {
		t.Errorf("deleted %v", plan.Deleted)
	}
	for _, it := range plan.Items {
		if filepath.Base(it.Path) == "ckpt-100.pt" && !strings.Contains(strings.Join(it.Why, ";"), "newest valid") {
			t.Errorf("ckpt-100.pt kept for %v, want newest valid", it.Why)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ckpt-100.pt")); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedLoadsUnderTorch: Debian's torch.load reads the damaged file
// without an error and returns other weights than the sound one holds:
// the danger latest and prune guard against.
func TestDamagedLoadsUnderTorch(t *testing.T) {
	t.Parallel()
	dir := damagedRun(t)
	script := `
import sys, torch
a = torch.load(sys.argv[1]); b = torch.load(sys.argv[2])
def flat(x, out):
    if isinstance(x, torch.Tensor): out.append(x.flatten().double())
    elif isinstance(x, dict): [flat(v, out) for v in x.values()]
    elif isinstance(x, (list, tuple)): [flat(v, out) for v in x]
    return out
fa, fb = flat(a, []), flat(b, [])
print("loaded", "differ" if any(not torch.equal(x, y) for x, y in zip(fa, fb)) else "same")
`
	out := runPython(t, "", script, filepath.Join(dir, "ckpt-100.pt"), filepath.Join(dir, "ckpt-200.pt"))
	if strings.TrimSpace(out) != "loaded differ" {
		t.Errorf("torch.load of the damaged file: %q, want it loaded with other weights", out)
	}
}

// TestSizeOverflow: a storage of 2**62+4 float32 elements wraps to 16
// bytes in 64-bit arithmetic, the size of its record; verify --deep
// refuses it (torch.load fails on it), the honest file passes.
func TestSizeOverflow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file  string
		valid bool
		why   string
	}{
		{"benign_numel.pt", true, ""},
		{"attack_numel_overflow.pt", false, "more bytes than a 64-bit size holds"},
	} {
		rep, err := Inspect(filepath.Join("testdata/edges", tc.file), Options{Deep: true, Structure: true})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Valid != tc.valid || !strings.Contains(rep.Reason, tc.why) {
			t.Errorf("%s: valid=%v %q, want %v with %q", tc.file, rep.Valid, rep.Reason, tc.valid, tc.why)
		}
	}
	out := runPython(t, "", `
import sys, torch
for p in sys.argv[1:]:
    try:
        torch.load(p); print("loads")
    except Exception:
        print("fails")
`, "testdata/edges/benign_numel.pt", "testdata/edges/attack_numel_overflow.pt")
	if strings.Fields(out)[0] != "loads" || strings.Fields(out)[1] != "fails" {
		t.Errorf("torch.load: %q, want the honest file to load and the wrapped one to fail", out)
	}
}

func TestCheckedSizes(t *testing.T) {
	t.Parallel()
	const big = int64(1) << 62
	if _, ok := mulSize(big+4, 4); ok {
		t.Error("(2**62+4)*4 did not overflow")
	}
	if n, ok := mulSize(big, 1); !ok || n != big {
		t.Error("2**62*1")
	}
	if _, ok := addSize(1<<63-1, 1); ok {
		t.Error("MaxInt64+1 did not overflow")
	}
	if _, ok := shapeNumel([]int64{1 << 32, 1 << 32}); ok {
		t.Error("2**64 elements did not overflow")
	}
	if _, ok := shapeNumel([]int64{3, -1}); ok {
		t.Error("a negative dimension passed")
	}
}
