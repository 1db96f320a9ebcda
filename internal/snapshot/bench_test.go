package snapshot

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDecode decodes and summarises a snapshot: the committed fixture,
// or the file $VRAMGUARD_SNAPSHOT_BENCH names (bench/snapshot/run.sh
// generates a 100 MB one).
func BenchmarkDecode(b *testing.B) {
	path := os.Getenv("VRAMGUARD_SNAPSHOT_BENCH")
	if path == "" {
		path = filepath.Join("testdata", "v2_6_p5.pickle")
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	for b.Loop() {
		s, err := ReadFile(path, DefaultLimits, nil)
		if err != nil {
			b.Fatal(err)
		}
		s.Summary(-1)
		s.Sites(-1)
	}
}
