package diagnose

import (
	"os"
	"strings"
	"testing"
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
