package snapshot

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/pickle/pickletest"
)

// sharedBlocks is a snapshot whose segments all hold one memoised list of
// 1000 blocks: walked once per segment, it is 10 M blocks from 600 KiB.
func sharedBlocks(segments, blocks int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02}(X\x08\x00\x00\x00segments](")
	// the first segment writes the list, every other reads it from memo 1
	b.WriteString("}(X\x0a\x00\x00\x00total_sizeJ\x00\x00\x00\x40X\x06\x00\x00\x00blocks]q\x01(")
	for range blocks {
		b.WriteString("}(X\x04\x00\x00\x00sizeJ\x00\x00\x10\x00X\x05\x00\x00\x00stateX\x10\x00\x00\x00active_allocatedu")
	}
	b.WriteString("eu")
	for range segments - 1 {
		b.WriteString("}(X\x0a\x00\x00\x00total_sizeJ\x00\x00\x00\x40X\x06\x00\x00\x00blocksh\x01u")
	}
	b.WriteString("eu.")
	return b.Bytes()
}

// TestHostileSnapshots: every hostile pickle is decoded or refused as not a
// snapshot, never crashes, and allocates in proportion to its bytes (at
// most 48 per byte of input and 100 MB in all, collected or not: the
// reader's buffers, stack, memo and containers together).
func TestHostileSnapshots(t *testing.T) {
	cases := pickletest.Bombs()
	cases = append(cases,
		pickletest.Bomb{Name: "shared blocks", Data: sharedBlocks(10_000, 1000), Why: "one list of 1000 blocks in 10 000 segments"},
		pickletest.Bomb{Name: "JSON whitespace", Data: []byte(strings.Repeat(" ", 48<<20) + `{"segments": []}`), Why: "48 MiB of spaces"},
	)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var err error
			var s *Snapshot
			n := pickletest.Allocated(func() { s, err = Decode(bytes.NewReader(c.Data), DefaultLimits, nil) })
			if err != nil && !errors.Is(err, ErrNotSnapshot) {
				t.Fatalf("%v does not wrap ErrNotSnapshot", err)
			}
			limit := min(48*uint64(len(c.Data))+(4<<20), 100<<20)
			if c.Name == "JSON whitespace" {
				limit = 4 << 20 // whitespace is skipped, never held
			}
			t.Logf("%s: %d bytes, %d allocated: %v", c.Name, len(c.Data), n, err)
			if n > limit {
				t.Errorf("%s (%s): %d bytes allocated %d, over %d", c.Name, c.Why, len(c.Data), n, limit)
			}
			if c.Name == "shared blocks" && err == nil {
				t.Errorf("a list of blocks in two segments was read as a snapshot: %d segments", len(s.Segments))
			}
		})
	}
}

// TestCycleRefusedOrRendered: a dict holding a tuple holding the dict, the
// root of a snapshot, is read (its user_metadata rendered to a bounded
// depth) without running away.
func TestCycleRefusedOrRendered(t *testing.T) {
	s, err := Decode(bytes.NewReader(pickletest.Cycle()), DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.UserMetadata, "...") || len(s.UserMetadata) > 4096 {
		t.Errorf("user_metadata rendered as %q", s.UserMetadata)
	}
}

// BenchmarkHostile decodes each hostile snapshot: B/op is what it
// allocates, collected or not.
func BenchmarkHostile(b *testing.B) {
	cases := append(pickletest.Bombs(),
		pickletest.Bomb{Name: "shared blocks", Data: sharedBlocks(10_000, 1000)},
		pickletest.Bomb{Name: "JSON whitespace", Data: []byte(strings.Repeat(" ", 48<<20) + `{"segments": []}`)},
	)
	for _, c := range cases {
		b.Run(c.Name, func(b *testing.B) {
			b.SetBytes(int64(len(c.Data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(bytes.NewReader(c.Data), DefaultLimits, nil); err != nil && !errors.Is(err, ErrNotSnapshot) {
					b.Fatal(err)
				}
			}
		})
	}
}
