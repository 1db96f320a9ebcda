package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// CopyRun copies the training run directory src into a new temporary
// directory, named run, and returns its path. Its checkpoints (ckpt-*)
// get the oldest modification times and everything else newer ones, a
// minute apart: the order in which a job writes its config and tokenizer
// after (or next to) its checkpoints, so that a pick by modification time
// alone would take a non-checkpoint.
func CopyRun(t testing.TB, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "run")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var paths []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(paths, func(i, j int) bool {
		ci, cj := strings.HasPrefix(filepath.Base(paths[i]), "ckpt-"), strings.HasPrefix(filepath.Base(paths[j]), "ckpt-")
		if ci != cj {
			return ci
		}
		return paths[i] < paths[j]
	})
	for i, p := range paths {
		rel, _ := filepath.Rel(src, p)
		CopyFile(t, p, filepath.Join(dst, rel), t0.Add(time.Duration(i)*time.Minute))
	}
	return dst
}

// CopyFile copies the file src to dst (making its directory), modified at
// mtime.
func CopyFile(t testing.TB, src, dst string, mtime time.Time) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// HashTree maps every regular file under dir (its path relative to dir)
// to its SHA-256.
func HashTree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WriteTree writes files (path relative to the root: content) under a new
// temporary root, making their directories, and returns the root.
func WriteTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// WriteFile writes body to the file name in dir with mode perm and returns
// its path.
func WriteFile[B string | []byte](t testing.TB, dir, name string, body B, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// Golden checks got against the golden file at path: a difference, or no
// file, fails the test. With update (a test's -update flag) it first
// writes got there, making its directory.
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("differs from %s (go test -update rewrites it; review the diff):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
