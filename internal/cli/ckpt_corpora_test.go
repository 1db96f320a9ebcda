package cli

import (
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestCkptLFSPointersCLI: the commands a user runs on a clone without
// git-lfs name the pointers and how to fetch the files.
func TestCkptLFSPointersCLI(t *testing.T) {
	dir := testbin.CorpusFile(t, "checkpoints/lfs-pointers")
	file := dir + "/training_args.bin"
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout+stderr
	}{
		{[]string{"ls", dir}, 0, "INVALID: a Git LFS pointer"},
		{[]string{"inspect", file}, 1, "a Git LFS pointer, not the file"},
		{[]string{"verify", file}, 1, "a Git LFS pointer, not the file"},
		{[]string{"scan", file}, 4, "a Git LFS pointer, not the file"},
		{[]string{"scan", dir}, 4, "git lfs pull"},
		{[]string{"latest", dir}, 1, "its 2 checkpoints are Git LFS pointers, not the files (a clone without git-lfs): run `git lfs pull`"},
	} {
		code, out, errOut := runCkpt(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.out) {
			t.Errorf("ckpt %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, tc.out, out, errOut)
		}
		if strings.Contains(out+errOut, "no pickle opcode") || strings.Contains(out+errOut, "no checkpoints") {
			t.Errorf("ckpt %s still says the old words:\n%s%s", strings.Join(tc.args, " "), out, errOut)
		}
	}
}
