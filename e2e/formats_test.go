package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrappedFailureVerdicts (issue #26) replays, through a real process
// under the built binary, the messages of internal/diagnose/testdata/formats
// (built from the formats in torch's source, not posted by anyone: see its
// README): a DataLoader worker's bus error seen through the worker-died
// wrapper is shm_exhausted, and one rank's NCCL failure under torchrun's
// rank prefix followed by the launcher's summary is nccl_error, not the
// launcher's exception.
func TestWrappedFailureVerdicts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "internal", "diagnose", "testdata", "formats")
	for _, c := range []struct{ file, reason string }{
		{"shm-bus-error-wrapped.txt", "shm_exhausted"},
		{"nccl-aborted-rank-prefix-torchrun.txt", "nccl_error"},
		{"nccl-store-reset-rank-prefix-torchrun.txt", "nccl_error"},
	} {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			p, _ := filepath.Abs(filepath.Join(dir, c.file))
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
			e := newEnv(t)
			r := e.run("run", "--json", "--no-probe", "--", python, "-c",
				"import sys; sys.stderr.write(open(sys.argv[1]).read()); sys.exit(1)", p)
			var v struct {
				Reason   string   `json:"reason"`
				Evidence []string `json:"evidence"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
				t.Fatalf("run --json: %v\n%s\n%s", err, r.stdout, r.stderr)
			}
			if r.code != 1 || v.Reason != c.reason {
				t.Errorf("exit %d reason %s, want 1 and %s; evidence:\n%s", r.code, v.Reason, c.reason, strings.Join(v.Evidence, "\n"))
			}
		})
	}
}
