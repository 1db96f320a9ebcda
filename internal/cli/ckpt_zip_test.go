package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every zip-level attack fixture (scripts/gen-zip-fixtures.py) fails
// `ckpt scan` with exit 1 and the finding named on stdout.
func TestCkptScanZipAttacks(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"local_name.pt", []string{"DANGEROUS", `names "archive/data.pkX"`, "os.system"}},
		{"case_name.pt", []string{"DANGEROUS", "os.system"}},
		{"disk1.pt", []string{"DANGEROUS", "disk 1 of a multi-disk archive", "os.system"}},
		{"eocd_comment.pt", []string{"DANGEROUS", "comment bytes follow it", "os.system"}},
		{"cd_after.pt", []string{"DANGEROUS", "not in the central directory", "os.system"}},
		{"stored_size.pt", []string{"DANGEROUS", "torch's reader reads 1052", "os.system"}},
		{"deflated_big.pt", []string{"DANGEROUS", "over the scanner's", "os.system"}},
		{"local_sizes.pt", []string{"DANGEROUS", "the local header says 5 bytes"}},
		{"bomb_overlap.pt", []string{"DANGEROUS", "overlap", "deflate bomb"}},
		{"bomb_single.pt", []string{"DANGEROUS", "deflate bomb"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t0 := time.Now()
			code, out, errOut := runCkpt(t, "scan", ckptTestdata+"/zipattack/"+tc.file)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			if el := time.Since(t0); el > 2*time.Second {
				t.Errorf("took %v", el)
			}
		})
	}
}

// inspect and verify (--deep too) fail the bombs quickly with a reason.
func TestCkptZipBombsInspectVerify(t *testing.T) {
	for _, f := range []string{"bomb_overlap.pt", "bomb_single.pt", "deflated_big.pt"} {
		for _, args := range [][]string{{"inspect"}, {"verify"}, {"verify", "--deep"}} {
			t0 := time.Now()
			code, out, errOut := runCkpt(t, append(args, ckptTestdata+"/zipattack/"+f)...)
			if code != 1 {
				t.Errorf("%v %s: exit %d\n%s%s", args, f, code, out, errOut)
			}
			if el := time.Since(t0); el > 2*time.Second {
				t.Errorf("%v %s took %v", args, f, el)
			}
		}
	}
}

// A Hugging Face cache snapshot (files are symlinks into ../../blobs) is
// scanned and listed through its links.
func TestCkptHFCacheSnapshot(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "models--org--model")
	b, err := os.ReadFile(ckptTestdata + "/malicious/torch_payload_badcrc.pt")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
	os.WriteFile(filepath.Join(repo, "blobs", "5eed"), b, 0o644)
	snap := filepath.Join(repo, "snapshots", "0123abcd")
	os.MkdirAll(snap, 0o755)
	if err := os.Symlink("../../blobs/5eed", filepath.Join(snap, "pytorch_model.bin")); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCkpt(t, "scan", snap)
	if code != 1 || !strings.Contains(out, "pytorch_model.bin") || strings.Contains(out, "no pickles found") {
		t.Errorf("scan of the snapshot: exit %d\n%s", code, out)
	}
	code, out, _ = runCkpt(t, "ls", snap)
	if !strings.Contains(out, "pytorch_model.bin") {
		t.Errorf("ls of the snapshot: exit %d\n%s", code, out)
	}
}
