package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
)

// zipCmdWork bounds what one ckpt command on a zip attack fixture may
// allocate and inflate: the bombs inflate to 250 MiB and more, of which
// the command reads the pickle (a few KiB) and never holds a record whole.
const zipCmdWork = 32 << 20

// runCkptWork is runCkpt, with what the command allocated and what it
// inflated from zip records.
func runCkptWork(t *testing.T, args ...string) (code int, stdout, stderr string, alloc uint64, inflated int64) {
	t.Helper()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	i0 := ziparc.TotalInflated()
	code, stdout, stderr = runCkpt(t, args...)
	inflated = ziparc.TotalInflated() - i0
	runtime.ReadMemStats(&m1)
	return code, stdout, stderr, m1.TotalAlloc - m0.TotalAlloc, inflated
}

// Every zip-level attack fixture (scripts/gen-zip-fixtures.py) fails
// `ckpt scan` with exit 1 and the finding named on stdout, allocating and
// inflating at most zipCmdWork.
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
			code, out, errOut, alloc, inflated := runCkptWork(t, "scan", ckptTestdata+"/zipattack/"+tc.file)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			if alloc > zipCmdWork || inflated > zipCmdWork {
				t.Errorf("allocated %d KiB and inflated %d KiB, over %d KiB", alloc>>10, inflated>>10, zipCmdWork>>10)
			}
		})
	}
}

// inspect and verify fail the bombs with exit 1 and a reason, allocating
// and inflating at most zipCmdWork; verify --deep (every record's CRC-32)
// inflates at most that and the 250 MiB the one bomb record declares,
// never holding it.
func TestCkptZipBombsInspectVerify(t *testing.T) {
	for _, f := range []string{"bomb_overlap.pt", "bomb_single.pt", "deflated_big.pt"} {
		for _, args := range [][]string{{"inspect"}, {"verify"}, {"verify", "--deep"}} {
			code, out, errOut, alloc, inflated := runCkptWork(t, append(args, ckptTestdata+"/zipattack/"+f)...)
			if code != 1 || !strings.Contains(out+errOut, "INVALID") {
				t.Errorf("%v %s: exit %d, want 1 and the file named invalid\n%s%s", args, f, code, out, errOut)
			}
			limit := int64(zipCmdWork)
			if args[len(args)-1] == "--deep" {
				limit += 250 << 20
			}
			t.Logf("%v %s: %d KiB allocated, %d KiB inflated", args, f, alloc>>10, inflated>>10)
			if alloc > zipCmdWork || inflated > limit {
				t.Errorf("%v %s: allocated %d KiB (at most %d KiB) and inflated %d KiB (at most %d KiB)",
					args, f, alloc>>10, zipCmdWork>>10, inflated>>10, limit>>10)
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
