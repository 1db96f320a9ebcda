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
		{"xz payload", []string{"scan", edges + "/attack_split.xz"}, 1, []string{"DANGEROUS", "os.system", "[xz, 1 pickle]"}},
		{"zstd payload", []string{"scan", edges + "/attack_pickle.zst"}, 1, []string{"DANGEROUS", "os.system", "[zstd, 1 pickle]"}},
		{"zstd plain", []string{"scan", edges + "/benign_pickle.zst"}, 0, []string{"ok", "[zstd, 1 pickle]"}},
		{"xz bomb", []string{"scan", edges + "/bomb.xz"}, 1, []string{"FAILED", "more than the scanner's 67108864-byte bound"}},
		{"legacy module record", []string{"scan", edges + "/attack_pid_patch.pt"}, 1, []string{"DANGEROUS", "BUILD on what persistent_load returns", "legacy module record of torch.nn.functional.relu"}},
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

// TestCkptEscapesNames: a file name with a newline or an escape sequence
// is printed quoted by every ckpt command, never raw; --json keeps it.
func TestCkptEscapesNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, err := os.ReadFile(ckptTestdata + "/torch/training.pt")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"ckpt-1.pt\nckpt-9.pt", "ckpt-2\x1b]0;owned\x07.pt"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"ls", dir}, {"latest", dir}, {"prune", dir, "--keep-last", "1"}, {"scan", dir}, {"verify", dir},
		{"inspect", filepath.Join(dir, names[1])}} {
		_, out, errOut := runCkpt(t, args...)
		all := out + errOut
		if strings.ContainsAny(all, "\x1b\x07") || strings.Contains(all, "\nckpt-9.pt") {
			t.Errorf("%v prints a raw name:\n%q", args, all)
		}
		if args[0] != "latest" && args[0] != "inspect" && !strings.Contains(all, `ckpt-1.pt\nckpt-9.pt`) {
			t.Errorf("%v does not name the file with the newline:\n%s", args, all)
		}
	}
	_, out, _ := runCkpt(t, "ls", "--json", dir)
	var es []struct{ Path string }
	if err := json.Unmarshal([]byte(out), &es); err != nil || len(es) != 2 {
		t.Fatalf("%v: %s", err, out)
	}
	for _, e := range es {
		if e.Path != filepath.Join(dir, names[0]) && e.Path != filepath.Join(dir, names[1]) {
			t.Errorf("--json path %q is not the file's name", e.Path)
		}
	}
}
