package ckpt

import (
	"archive/zip"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vramguard/vramguard/internal/pickle/pickletest"
)

// deflatedTorchZip is a torch archive whose data.pkl is pkl, deflated: a
// pickle of millions of one-byte opcodes is a few KB.
func deflatedTorchZip(t *testing.T, pkl []byte) []byte {
	t.Helper()
	return zipOf(t, zip.Deflate, member{"archive/data.pkl", pkl}, member{"archive/version", []byte("3\n")})
}

// TestPickleBombsCostTheirBytes: a torch archive whose data.pkl is one of
// the hostile pickles (a memo of millions of values, one SETITEMS of
// millions of keys, floods of DUP or EMPTY_LIST: 10 KB deflated), and the
// same pickles as plain files, are inspected (what ls, verify, latest and
// run --resume-from ask) and scanned allocating at most 48 bytes per byte of
// pickle and 100 MB, collected or not.
func TestPickleBombsCostTheirBytes(t *testing.T) {
	dir := t.TempDir()
	for _, b := range pickletest.Bombs() {
		for _, form := range []string{"zip", "plain"} {
			data := b.Data
			if form == "zip" {
				data = deflatedTorchZip(t, b.Data)
			}
			p := filepath.Join(dir, "bomb.pt")
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			limit := min(48*uint64(len(b.Data))+(8<<20), 100<<20)
			for _, what := range []string{"inspect", "scan"} {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				var valid bool
				var reason string
				if what == "inspect" {
					rep, err := Inspect(p, Options{})
					if err != nil {
						t.Fatalf("%s %s: %v", b.Name, form, err)
					}
					valid, reason = rep.Valid, rep.Reason
				} else {
					res, err := ScanFile(p)
					if err != nil {
						t.Fatalf("%s %s: %v", b.Name, form, err)
					}
					valid = res.Safe
					if len(res.Errors) > 0 {
						reason = res.Errors[0]
					}
				}
				runtime.ReadMemStats(&m1)
				n := m1.TotalAlloc - m0.TotalAlloc
				t.Logf("%s, %s (%d bytes, pickle %d): %s allocated %d KiB, valid/safe=%v %s", b.Name, form, len(data), len(b.Data), what, n>>10, valid, reason)
				if n > limit {
					t.Errorf("%s, %s: %s allocated %d MiB for %d bytes of pickle, over %d MiB", b.Name, form, what, n>>20, len(b.Data), limit>>20)
				}
			}
		}
	}
}
