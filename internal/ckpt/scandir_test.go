package ckpt

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// compressedCases: scripts/gen-edge-fixtures.py's compressed pickles, each
// written by Python's own compressor. lzma's legacy format has no magic:
// it is known by liblzma's header checks, what lzma.open applies.
var compressedCases = []struct {
	file, format, status string
	err                  string // in Errors
}{
	{"attack_pickle.gz", "gzip", StatusDangerous, ""},
	{"attack_pickle.bz2", "bz2", StatusDangerous, ""},
	{"attack_pickle.zlib", "zlib", StatusDangerous, ""},
	{"attack_pickle.xz", "xz", StatusDangerous, ""},
	{"attack_split.xz", "xz", StatusDangerous, ""},
	{"attack_pickle.zst", "zstd", StatusDangerous, ""},
	{"attack_skippable.zst", "zstd", StatusDangerous, ""},
	{"attack_pickle.lzma", "lzma", StatusDangerous, ""},
	{"attack_alone.xz", "lzma", StatusDangerous, ""},
	{"attack_empty_first.lzma", "lzma", StatusDangerous, ""},
	{"benign_pickle.lzma", "lzma", StatusOK, ""},
	{"benign_pickle.xz", "xz", StatusOK, ""},
	{"benign_pickle.zst", "zstd", StatusOK, ""},
	{"benign_sha256.xz", "xz", StatusOK, ""},
	{"bigdict.xz", "xz", StatusFailed, "a block declares a 4294967295-byte dictionary, over the scanner's 68157440-byte bound"},
	{"bomb.gz", "gzip", StatusFailed, "decompresses to more than the scanner's 67108864-byte bound"},
	{"bomb.xz", "xz", StatusFailed, "decompresses to more than the scanner's 67108864-byte bound"},
	{"bomb.zst", "zstd", StatusFailed, "decompresses to more than the scanner's 67108864-byte bound"},
}

// TestScanCompressedPickles: a pickle compressed with gzip, bz2, zlib, xz
// (every stream) or zstd is decompressed (bounded) and scanned, as
// pickle.load(gzip.open(...)), joblib and pandas read it; past the bound
// it is a finding. The real loaders run every attack's payload.
func TestScanCompressedPickles(t *testing.T) {
	t.Parallel()
	testbin.Need(t, testbin.Zstandard)
	var attacks []string
	for _, tc := range compressedCases {
		p := filepath.Join("testdata/edges", tc.file)
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ok := res.Format == tc.format && res.Status == tc.status && res.Safe == (tc.status == StatusOK)
		if tc.status == StatusDangerous {
			ok = ok && res.Dangerous == 1 && res.Hits[0].Global == "os.system" && len(res.Errors) == 0
			attacks = append(attacks, p)
		}
		if tc.err != "" {
			ok = ok && strings.Contains(strings.Join(res.Errors, "\n"), tc.err)
		}
		if !ok {
			t.Errorf("%s: format %q status %q, want %q %q (error %q): %+v", tc.file, res.Format, res.Status, tc.format, tc.status, tc.err, res)
		}
	}
	// bigdict.xz is sound: lzma.open reads it (allocating what it declares).
	if out := runPython(t, "", "import lzma, pickle, sys; print(pickle.load(lzma.open(sys.argv[1]))['name'])", "testdata/edges/bigdict.xz"); out != "run\n" {
		t.Errorf("bigdict.xz under lzma.open: %q", out)
	}
	// In a directory too: a file whose first byte is no pickle opcode is
	// skipped there, which the skippable frame's 0x5f and the lzma
	// header's 0x00 were before.
	for _, f := range []string{"attack_skippable.zst", "attack_alone.xz", "attack_empty_first.lzma"} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, f), readFixture(t, f), 0o644)
		if rs, err := ScanPath(dir); err != nil || len(rs) != 1 || rs[0].Status != StatusDangerous {
			t.Errorf("%s in a directory: %+v %v", f, rs, err)
		}
	}
	ran := runLoader(t, `
        import gzip, bz2, lzma, zlib, zstandard
        ext = p.rsplit(".", 1)[1]
        if ext == "zlib":
            pickle.loads(zlib.decompress(open(p, "rb").read()))
        elif ext == "zst":  # its reader has no readline, which protocol 0 needs
            pickle.loads(zstandard.open(p).read())
        else:
            pickle.load({"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open, "lzma": lzma.open, "zst": zstandard.open}[ext](p))`, attacks)
	for _, p := range attacks {
		if !ran[filepath.Base(p)] {
			t.Errorf("%s: the loader did not run the payload", filepath.Base(p))
		}
	}
}

// TestScanCompressedDamaged: a compressed pickle cut short, an lzma stream
// followed by bytes that are no stream, an xz file whose
// streams cannot be walked from its end, or a zstd frame
// asking for a window over the decoder's 128 MiB (what Python's binding
// refuses too), is a finding, never a pass, even where what was
// decompressed before the damage is a whole harmless pickle.
func TestScanCompressedDamaged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data func() []byte
	}{
		{"cut.xz", func() []byte { b := readFixture(t, "benign_pickle.xz"); return b[:len(b)-12] }},
		{"cut.zst", func() []byte { b := readFixture(t, "benign_pickle.zst"); return b[:len(b)-4] }},
		{"junk after.xz", func() []byte { return append(readFixture(t, "benign_pickle.xz"), "junk"...) }},
		{"cut.lzma", func() []byte { b := readFixture(t, "benign_pickle.lzma"); return b[:len(b)-8] }},
		{"junk after.lzma", func() []byte { return append(readFixture(t, "benign_pickle.lzma"), "junk after"...) }},
		{"cut.gz", func() []byte {
			var b bytes.Buffer
			g := gzip.NewWriter(&b)
			g.Write([]byte("\x80\x04K\x01."))
			g.Close()
			return b.Bytes()[:b.Len()-4]
		}},
		{"window.zst", func() []byte { return rawZstdFrame(18) }},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, tc.data(), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Safe || res.Status != StatusFailed || len(res.Errors) == 0 {
			t.Errorf("%s: %+v", tc.name, res)
		}
	}
	// Two lzma streams are read as lzma.open reads them, one after the
	// other; zero bytes after the last (up to 1 MiB) decompress to nothing.
	b := readFixture(t, "benign_pickle.lzma")
	for name, data := range map[string][]byte{"two.lzma": append(bytes.Clone(b), b...), "zeros after.lzma": append(bytes.Clone(b), make([]byte, 100)...)} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		want := map[string]int{"two.lzma": 2, "zeros after.lzma": 1}[name]
		if res, err := ScanFile(p); err != nil || !res.Safe || res.Pickles != want {
			t.Errorf("%s: %+v %v", name, res, err)
		}
	}
	// The same frame with a 1 MiB window passes: the frame is sound.
	p := filepath.Join(dir, "window_ok.zst")
	os.WriteFile(p, rawZstdFrame(10), 0o644)
	if res, err := ScanFile(p); err != nil || !res.Safe || res.Pickles != 1 {
		t.Errorf("window_ok.zst: %+v %v", res, err)
	}
}

// TestScanCompressedEveryDamage: every truncation and every one-byte
// change of the small compressed fixtures scans without a panic, and none
// of the attacks' damaged copies passes unless the payload is gone from
// what a decoder yields.
func TestScanCompressedEveryDamage(t *testing.T) {
	t.Parallel()
	for _, tc := range compressedCases {
		data := readFixture(t, tc.file)
		if len(data) > 512 {
			continue
		}
		var variants [][]byte
		for i := range data {
			variants = append(variants, data[:i])
			for _, x := range []byte{0x01, 0x80, 0xff} {
				v := bytes.Clone(data)
				v[i] ^= x
				variants = append(variants, v)
			}
		}
		for _, v := range variants {
			res := newScanResult(tc.file, "", ScanOptions{})
			scanReader(bytes.NewReader(v), int64(len(v)), res)
			if tc.status == StatusDangerous && res.Safe && bytes.Contains(decompressAll(v), []byte("system")) {
				t.Errorf("%s: a damaged copy passes and still holds the payload: %x", tc.file, v)
			}
		}
	}
}

// decompressAll is what the scanner's decoders yield from b, for the
// check above; nil when b is not compressed.
func decompressAll(b []byte) []byte {
	kind := compressedFormat(b)
	if kind == "" && lzmaAloneHeader(b) {
		kind = "lzma"
	}
	if kind == "" {
		return b
	}
	src := &countingReader{r: bufio.NewReader(bytes.NewReader(b))}
	zr, closeZ, err := decompressor(kind, src, bytes.NewReader(b), int64(len(b)))
	defer closeZ()
	if err != nil {
		return nil
	}
	out, _ := io.ReadAll(io.LimitReader(zr, 1<<20))
	return out
}

// rawZstdFrame is a zstd frame whose window descriptor has exponent exp
// (a window of 2^(10+exp) bytes) and no content size, holding one raw
// block: a harmless pickle.
func rawZstdFrame(exp byte) []byte {
	plain := []byte("\x80\x04K\x01.")
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, exp << 3}
	hdr := uint32(len(plain))<<3 | 1 // last block, raw
	b = append(b, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(b, plain...)
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/edges", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestScanDirNeverSilent: a directory too deep to descend into is a
// finding; a gzipped log is named as skipped.
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
}

// TestScanDirUnreadable: a subdirectory and a file the scan cannot read
// are each a finding (failed, "permission denied"), never silence, next to
// a readable file that is scanned. Root reads any directory, so as root
// (CI) the scan runs in this test binary started as nobody (setpriv
// --reuid=65534), which permissions stop as they stop any user; as
// another user it runs here. Either way the scan ran as a user the modes
// keep out (the child reports its euid).
func TestScanDirUnreadable(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "vg-ckpt-unreadable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(base, "tree", "locked"), 0o755); os.RemoveAll(base) })
	tree := filepath.Join(base, "tree")
	locked := filepath.Join(tree, "locked")
	if err := os.MkdirAll(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"locked/evil.pkl": osSystemPayload, "ok.pkl": "\x80\x04K\x01.", "secret.pkl": osSystemPayload} {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, mode := range map[string]os.FileMode{base: 0o755, tree: 0o755, locked: 0, filepath.Join(tree, "secret.pkl"): 0} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	var rep scanChildReport
	if os.Geteuid() == 0 {
		testbin.Need(t, testbin.Setpriv)
		// The test binary's own directory is private to root: a copy in
		// base is one nobody can run.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(base, "ckpt.test")
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := testbin.Command(t, []string{"PATH=/usr/bin:/bin", scanChildEnv + "=" + tree},
			"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("scan as nobody: %v: %s", err, out)
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if rep.EUID != 65534 {
			t.Fatalf("the child ran as euid %d", rep.EUID)
		}
		// Root itself reads the locked directory: the payload in it is found.
		rs, err := ScanPath(tree)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Path == filepath.Join(locked, "evil.pkl") && r.Status != StatusDangerous {
				t.Errorf("as root: %+v", r)
			}
		}
	} else {
		rs, err := ScanPath(tree)
		if err != nil {
			t.Fatal(err)
		}
		rep = scanChildReport{EUID: os.Geteuid(), Results: rs}
	}
	byPath := map[string]*ScanResult{}
	for _, r := range rep.Results {
		byPath[r.Path] = r
	}
	for _, p := range []string{locked, filepath.Join(tree, "secret.pkl")} {
		if r := byPath[p]; r == nil || r.Safe || r.Status != StatusFailed || !strings.Contains(strings.Join(r.Errors, ""), "permission denied") {
			t.Errorf("%s (euid %d): %+v", p, rep.EUID, r)
		}
	}
	if r := byPath[filepath.Join(tree, "ok.pkl")]; r == nil || r.Status != StatusOK {
		t.Errorf("ok.pkl (euid %d): %+v", rep.EUID, r)
	}
	if len(rep.Results) != 3 {
		t.Errorf("want 3 results (locked, ok.pkl, secret.pkl), got %d: %+v", len(rep.Results), rep.Results)
	}
}

// TestChunksReadAt: the decompressed bytes read back at any offset and
// length as from one slice, within the size the scan keeps.
func TestChunksReadAt(t *testing.T) {
	t.Parallel()
	data := make([]byte, 3*chunkSize+12345)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	c, err := readChunks(bytes.NewReader(data), int64(len(data)))
	if err != nil || c.size != int64(len(data)) {
		t.Fatalf("size %d, %v", c.size, err)
	}
	c.size -= 100 // as the scan cuts what is past its bound
	keep := data[:c.size]
	for _, tc := range []struct{ off, n int64 }{
		{0, 10}, {64<<10 - 3, 10}, {chunkSize - 1, 2}, {chunkSize + (64 << 10) - 5, chunkSize + 9}, {0, c.size}, {c.size - 4, 10}, {c.size, 1}, {c.size + 5, 1},
	} {
		p := make([]byte, tc.n)
		n, err := c.ReadAt(p, tc.off)
		want := keep[min(tc.off, c.size):min(tc.off+tc.n, c.size)]
		if n != len(want) || !bytes.Equal(p[:n], want) || (n < len(p)) != (err == io.EOF) {
			t.Errorf("ReadAt(%d bytes at %d) = %d, %v; want %d bytes", tc.n, tc.off, n, err, len(want))
		}
	}
}
