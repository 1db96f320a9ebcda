package pickle

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vramguard/vramguard/internal/pickle/pickletest"
)

// TestBombsCostTheirBytes: every hostile pickle decodes or is refused by a
// bound, and the decode allocates at most 48 bytes per byte of input and
// 100 MB in all, collected or not.
func TestBombsCostTheirBytes(t *testing.T) {
	for _, b := range append(pickletest.Bombs(), pickletest.Dicts()...) {
		t.Run(b.Name, func(t *testing.T) {
			var err error
			n := pickletest.Allocated(func() { _, err = DecodeBytes(b.Data, DefaultLimits) })
			if err != nil && !errors.Is(err, ErrLimit) {
				t.Fatalf("%s: %v, want a value or a bound", b.Name, err)
			}
			limit := min(48*uint64(len(b.Data))+(4<<20), 100<<20)
			t.Logf("%s: %d bytes in, %d allocated (%v)", b.Name, len(b.Data), n, err)
			if n > limit {
				t.Errorf("%s (%s): %d bytes of input allocate %d, over %d", b.Name, b.Why, len(b.Data), n, limit)
			}
		})
	}
}

// TestCycleDecodes: a container that holds itself decodes to a value that
// holds itself (walks bound themselves), it never overflows anything.
func TestCycleDecodes(t *testing.T) {
	res, err := DecodeBytes(pickletest.Cycle(), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Value.(*Dict)
	v, _ := d.Get("user_metadata")
	if tu, ok := v.(Tuple); !ok || len(tu) != 1 || tu[0] != any(d) {
		t.Fatalf("user_metadata = %s, want a tuple holding the dict", fmt.Sprint(v)[:20])
	}
}

// BenchmarkBombs decodes each hostile pickle and each dict of millions of
// items: B/op is what it allocates.
func BenchmarkBombs(b *testing.B) {
	for _, bomb := range append(pickletest.Bombs(), pickletest.Dicts()...) {
		b.Run(bomb.Name, func(b *testing.B) {
			b.SetBytes(int64(len(bomb.Data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeBytes(bomb.Data, DefaultLimits); err != nil && !errors.Is(err, ErrLimit) {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMemoOfScalarsCostsWords: a memo of millions of None, bools or small
// ints costs a 4-byte word an entry, not an interface: 4.9 M entries, each
// popped, allocate at most 5 bytes an entry in all.
func TestMemoOfScalarsCostsWords(t *testing.T) {
	const n = 4_900_000
	for _, tc := range []struct{ name, value string }{
		{"None", "N"},
		{"True", "\x88"},
		{"small int", "K\x07"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := pickletest.Flood("", tc.value+"\x940", n)
			var err error
			got := pickletest.Allocated(func() { _, err = DecodeBytes(data, DefaultLimits) })
			if err != nil {
				t.Fatal(err)
			}
			if got > 5*n {
				t.Errorf("%d memo entries of %s allocate %d bytes, over %d", n, tc.name, got, 5*n)
			}
		})
	}
}
