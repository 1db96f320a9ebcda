package cli

import (
	"archive/zip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCkptScanStatuses: scan's exit status and words for what it
// understood and what it did not.
func TestCkptScanStatuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	blob := write("weights.bin", []byte("{\x00\x01binary in no format"))
	zp := filepath.Join(dir, "notes.zip")
	zf, _ := os.Create(zp)
	zw := zip.NewWriter(zf)
	w, _ := zw.Create("readme.txt")
	w.Write([]byte("plain text"))
	zw.Close()
	zf.Close()
	// A zip member numpy.load would read as a .npy, with a header the
	// scanner cannot parse.
	bad := "{'descr': '<i8', 'fortran_order': False, 'shape': (1+1,)}"
	zp2 := filepath.Join(dir, "odd.npz")
	zf, _ = os.Create(zp2)
	zw = zip.NewWriter(zf)
	w, _ = zw.Create("a.npy")
	w.Write(append([]byte("\x93NUMPY\x01\x00"+string(rune(len(bad)))+"\x00"), bad...))
	zw.Close()
	zf.Close()
	edges := ckptTestdata + "/edges"
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
	}{
		{"blob alone", []string{"scan", blob}, ExitNotUnderstood, []string{"NOT UNDERSTOOD", "first byte 0x7b"}},
		{"plain zip", []string{"scan", zp}, 0, []string{"ok", "[zip, 0 pickles]"}},
		{"npz header", []string{"scan", zp2}, ExitNotUnderstood, []string{"NOT UNDERSTOOD", "a.npy: .npy header"}},
		{"npy plain", []string{"scan", edges + "/benign_int.npy"}, 0, []string{"ok", "[npy, 0 pickles]"}},
		{"npy payload", []string{"scan", edges + "/attack_object.npy"}, 1, []string{"DANGEROUS", "os.system"}},
		{"dir", []string{"scan", dir}, ExitNotUnderstood, []string{"skipped  " + blob, "no pickle opcode", "NOT UNDERSTOOD  " + zp2}},
	}
	for _, tc := range tests {
		code, out, errOut := runCkpt(t, tc.args...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", tc.name, code, tc.code, out, errOut)
		}
		for _, s := range tc.stdout {
			if !strings.Contains(out, s) {
				t.Errorf("%s: stdout lacks %q:\n%s", tc.name, s, out)
			}
		}
	}
	code, out, _ := runCkpt(t, "scan", "--json", dir)
	var rs []struct {
		Path, Status, Skipped string
		Safe                  bool
		NotUnderstood         []string `json:"not_understood"`
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil || code != ExitNotUnderstood || len(rs) != 3 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	want := map[string]string{"notes.zip": "ok", "odd.npz": "not-understood", "weights.bin": "skipped"}
	for _, r := range rs {
		if want[filepath.Base(r.Path)] != r.Status || (r.Status == "ok") != r.Safe {
			t.Errorf("%s: status %s safe %v", r.Path, r.Status, r.Safe)
		}
	}
}
