package supervise

import (
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestResumeFromLFSPointers: run --resume-from a clone without git-lfs
// (real pointer files under checkpoint names) starts from scratch saying
// why: the checkpoints are Git LFS pointers, fetch them with git lfs pull.
func TestResumeFromLFSPointers(t *testing.T) {
	s := &supervisor{o: Options{ResumeFrom: testbin.CorpusFile(t, "checkpoints/lfs-pointers")}}
	r := s.findResume()
	if r.From != "" || !strings.Contains(r.Problem, "Git LFS pointers") || !strings.Contains(r.Problem, "git lfs pull") || len(r.Skipped) != 2 {
		t.Fatalf("resume %+v", r)
	}
	for _, sk := range r.Skipped {
		if !strings.Contains(sk.Reason, "a Git LFS pointer, not the file") {
			t.Errorf("skipped %s: %s", sk.Path, sk.Reason)
		}
	}
}
