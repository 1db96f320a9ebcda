package ckpt

import (
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// loaders runs the Python programs that ask the real loaders (Debian's
// torch, numpy, zstandard) what they do with a file. One interpreter imports
// them once and each program runs in a fork of it, as `python -c` would run
// it (testbin.Zygote): a dozen programs, each paying torch's import (2 s of
// CPU), were most of this package's test time. A payload a program runs
// dies with its process.
var loaders = testbin.NewZygote("torch", "numpy", "zstandard")

// runPython runs a Python program with stdin and args under the real
// loaders and returns its stdout; it fails t unless the program exits 0.
func runPython(t *testing.T, stdin, script string, args ...string) string {
	t.Helper()
	r := loaders.Run(t, stdin, script, args...)
	if r.Code != 0 {
		t.Fatalf("python3 -c: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}
