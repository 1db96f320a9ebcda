package diagnose

import (
	"os"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// TestFailuresDocumented keeps docs/FAILURES.md in step with the codes.
func TestFailuresDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/FAILURES.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Reasons {
		if !strings.Contains(string(b), "| `"+r+"` |") {
			t.Errorf("docs/FAILURES.md has no row for %s", r)
		}
	}
}

// TestPatternsCompile: the classifier's patterns compile on first use
// (lazyre); compile them all here so a bad one fails a test, not a run.
func TestPatternsCompile(t *testing.T) {
	if err := lazyre.CompileAll(); err != nil {
		t.Fatal(err)
	}
}
