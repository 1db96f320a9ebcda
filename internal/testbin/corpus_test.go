package testbin

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCorporaBesideTheCheckout(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repoRoot %s holds no go.mod: %v", root, err)
	}
	dir := Corpora(t)
	for _, sub := range []string{"snapshots", "checkpoints", "scanners", "picklescan"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() {
			t.Errorf("corpus %s lacks %s/: %v", dir, sub, err)
		}
	}
}
