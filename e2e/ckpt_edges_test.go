package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
