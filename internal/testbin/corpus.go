package testbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Corpora is the directory of real-world files the tests read: CUDA memory
// snapshots, checkpoints and run directories, scanners' samples
// (SOURCES.md in it says where each came from). It lies beside the
// checkout, as ../shared/corpora from the repository root, and is never
// copied into the project; VRAMGUARD_CORPORA names another place (a
// worktree outside the checkout's parent). A missing corpus fails the
// test: the files are part of what CI runs on.
func Corpora(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("VRAMGUARD_CORPORA"); dir != "" {
		return mustCorpus(t, dir)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("corpora: %v", err)
	}
	return mustCorpus(t, filepath.Join(filepath.Dir(root), "shared", "corpora"))
}

// CorpusFile is the path of name (slash-separated) under Corpora.
func CorpusFile(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Corpora(t), filepath.FromSlash(name))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("corpora: %v", err)
	}
	return p
}

func mustCorpus(t testing.TB, dir string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "SOURCES.md")); err != nil {
		t.Fatalf("corpora: no real-world corpus at %s (it lies beside the checkout as ../shared/corpora; VRAMGUARD_CORPORA names another place): %v", dir, err)
	}
	return dir
}

// repoRoot is the directory holding the module's go.mod, found upward from
// the working directory (a test runs in its package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module ") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
