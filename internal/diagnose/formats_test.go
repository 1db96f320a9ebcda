package diagnose

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormats classifies the messages of testdata/formats (built from the
// formats in torch's source, see its README) and checks the reason and the
// evidence a person needs: a worker's bus error is a full /dev/shm however
// it is wrapped; one rank's NCCL failure followed by the launcher's summary
// is an NCCL error of that rank, not the launcher's ChildFailedError.
func TestFormats(t *testing.T) {
	for _, c := range []struct {
		file, reason, evidence string
	}{
		{"shm-bus-error-wrapped.txt", ShmExhausted, "is killed by signal: Bus error"},
		{"nccl-aborted-rank-prefix-torchrun.txt", NCCLError, "rank 1"},
		{"nccl-store-reset-rank-prefix-torchrun.txt", NCCLError, "rank 1"},
	} {
		t.Run(c.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "formats", c.file))
			if err != nil {
				t.Fatal(err)
			}
			v := Classify(Input{ExitCode: 1, Tail: strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")})
			if v.Reason != c.reason {
				t.Errorf("reason %s (%s), want %s; evidence %q", v.Reason, v.Summary, c.reason, v.Evidence)
			}
			if ev := strings.Join(v.Evidence, "\n"); !strings.Contains(ev, c.evidence) {
				t.Errorf("evidence lacks %q:\n%s", c.evidence, ev)
			}
			if len(v.Advice) == 0 {
				t.Error("no advice")
			}
		})
	}
}
