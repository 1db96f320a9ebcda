package ckpt

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"compress/zlib"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestScanCompressedPickles: a pickle compressed with gzip, bz2 or zlib is
// decompressed (bounded) and scanned, as pickle.load(gzip.open(...)),
// joblib and pandas read it; xz (and zstd) are not decompressed by the
// scanner and so are not understood, never passed. The real loaders run
// each payload.
func TestScanCompressedPickles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	payload := []byte(osSystemPayload)
	var gz, zl bytes.Buffer
	g := gzip.NewWriter(&gz)
	g.Write(payload)
	g.Close()
	z := zlib.NewWriter(&zl)
	z.Write(payload)
	z.Close()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gzp := write("model.pkl.gz", gz.Bytes())
	zlp := write("model.pkl.z", zl.Bytes())
	// Go has no bzip2 or xz writer: Python's own modules write them.
	out, err := exec.Command(testbin.Python(), "-c", `
import bz2, lzma, sys
open(sys.argv[1], "wb").write(bz2.compress(open(sys.argv[3], "rb").read()))
open(sys.argv[2], "wb").write(lzma.compress(open(sys.argv[3], "rb").read()))
`, filepath.Join(dir, "model.pkl.bz2"), filepath.Join(dir, "model.pkl.xz"), write("raw", payload)).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	bzp, xzp := filepath.Join(dir, "model.pkl.bz2"), filepath.Join(dir, "model.pkl.xz")
	if r, err := bzip2.NewReader(mustOpen(t, bzp)).Read(make([]byte, 4)); err != nil || r == 0 {
		t.Fatalf("bz2 fixture: %v", err)
	}
	for _, tc := range []struct {
		path, format, status string
	}{
		{gzp, "gzip", StatusDangerous}, {bzp, "bz2", StatusDangerous}, {zlp, "zlib", StatusDangerous}, {xzp, "xz", StatusNotUnderstood},
	} {
		res, err := ScanFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if res.Format != tc.format || res.Status != tc.status || res.Safe {
			t.Errorf("%s: format %q status %q: %+v", filepath.Base(tc.path), res.Format, res.Status, res)
		}
	}
	ran := runLoader(t, `
        import gzip, bz2, lzma, zlib
        opener = {"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(p.rsplit(".", 1)[1])
        if opener:
            pickle.load(opener(p))
        else:
            pickle.loads(zlib.decompress(open(p, "rb").read()))`, []string{gzp, bzp, zlp, xzp})
	for _, p := range []string{gzp, bzp, zlp, xzp} {
		if !ran[filepath.Base(p)] {
			t.Errorf("%s: the loader did not run the payload", filepath.Base(p))
		}
	}
}

func mustOpen(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestScanDirNeverSilent: a directory too deep to descend into, and one
// that cannot be read, are findings; a gzipped log is named as skipped.
func TestScanDirNeverSilent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	deep := dir
	for i := 0; i <= MaxFollowDepth; i++ {
		deep = filepath.Join(deep, "d")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(deep, "evil.pkl"), []byte(osSystemPayload), 0o644)
	var gz bytes.Buffer
	g := gzip.NewWriter(&gz)
	g.Write([]byte("{\"loss\": 1}\n"))
	g.Close()
	os.WriteFile(filepath.Join(dir, "train.log.gz"), gz.Bytes(), 0o644)
	locked := filepath.Join(dir, "locked")
	os.Mkdir(locked, 0o755)
	os.WriteFile(filepath.Join(locked, "evil.pkl"), []byte(osSystemPayload), 0o644)
	os.Chmod(locked, 0)
	defer os.Chmod(locked, 0o755)
	rs, err := ScanPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*ScanResult{}
	for _, r := range rs {
		byPath[r.Path] = r
	}
	var depthHit *ScanResult
	for p, r := range byPath {
		if strings.HasSuffix(p, "/d") && strings.Contains(strings.Join(r.Errors, ""), "deeper than 64 levels") {
			depthHit = r
		}
	}
	if depthHit == nil || depthHit.Safe || depthHit.Status != StatusFailed {
		t.Errorf("depth limit not reported: %+v", rs)
	}
	if r := byPath[filepath.Join(dir, "train.log.gz")]; r == nil || r.Status != StatusSkipped || !strings.Contains(r.Skipped, "gzip-compressed") {
		t.Errorf("gzipped log: %+v", r)
	}
	if os.Geteuid() != 0 { // root reads any directory
		if r := byPath[locked]; r == nil || r.Status != StatusFailed || !strings.Contains(strings.Join(r.Errors, ""), "permission denied") {
			t.Errorf("unreadable directory: %+v", r)
		}
	} else if r := byPath[filepath.Join(locked, "evil.pkl")]; r == nil || r.Status != StatusDangerous {
		t.Errorf("as root the locked directory is read: %+v", r)
	}
}
