package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
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

// manyDicts is a list of n dicts of k distinct int keys each (each to
// None), every dict written as CPython writes one (SETITEMS in batches of
// 1000): under any bound on one dict's items, n of them hold n*k.
func manyDicts(n, k int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02](")
	for range n {
		b.WriteString("}(")
		for i := range k {
			if i > 0 && i%1000 == 0 {
				b.WriteString("u(")
			}
			b.WriteByte('J')
			b.Write([]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)})
			b.WriteByte('N')
		}
		b.WriteString("u")
	}
	b.WriteString("e.")
	return b.Bytes()
}

// hostileCases are pickletest's bombs and dicts and the snapshot view's own.
func hostileCases() []pickletest.Bomb {
	cases := append(pickletest.Bombs(), pickletest.Dicts()...)
	return append(cases,
		pickletest.Bomb{Name: "shared blocks", Data: sharedBlocks(10_000, 1000), Why: "one list of 1000 blocks in 10 000 segments"},
		pickletest.Bomb{Name: "many dicts", Data: manyDicts(2400, 1000), Why: "2400 dicts of 1000 distinct keys: 2.4 M items"},
		pickletest.Bomb{Name: "JSON whitespace", Data: []byte(strings.Repeat(" ", 48<<20) + `{"segments": []}`), Why: "48 MiB of spaces"},
	)
}

// TestHostileSnapshots: every hostile pickle is decoded or refused as not a
// snapshot, never crashes, and allocates in proportion to its bytes (at
// most 48 per byte of input and 100 MB in all, collected or not: the
// reader's buffers, stack, memo and containers together).
func TestHostileSnapshots(t *testing.T) {
	for _, c := range hostileCases() {
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
	for _, c := range hostileCases() {
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

// settingsOf is a snapshot of no segments whose allocator_settings holds n
// keys "k0"... (JSON).
func settingsOf(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"segments": [], "allocator_settings": {`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"k%d": %d`, i, i)
	}
	b.WriteString("}}")
	return b.Bytes()
}

var atByte = regexp.MustCompile(`(?:at byte|within the first) (\d+)`)

// TestLargeDictsRefused: a dict past what any snapshot's dict holds, or
// dicts whose items outgrow their share of the bytes read, are refused as
// they grow, with the byte they were met at; a dict at the bound is read.
func TestLargeDictsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		want string // "" for a snapshot read
		// atMost bounds the byte the refusal names
		atMost int64
	}{
		{"2.4 M keys in batches", pickletest.DictKeysBatched(2_400_000), "a dict of more than 4096 items", 64 << 10},
		{"2400 dicts of 1000 keys", manyDicts(2400, 1000), "dicts of 10", 2 << 20},
		{"JSON settings of 4097 keys", settingsOf(4097), "a dict of more than 4096 items", 1 << 20},
		// refused as the object grows, not once all of it is read
		{"JSON settings of 2.4 M keys", settingsOf(2_400_000), "a dict of more than 4096 items", 1 << 20},
		{"JSON settings of 4096 keys", settingsOf(4096), "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Decode(bytes.NewReader(c.data), DefaultLimits, nil)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(s.AllocatorSettings) != 4096 || s.AllocatorSettings[4095] != (Setting{"k4095", "4095"}) {
					t.Errorf("%d settings, last %v", len(s.AllocatorSettings), s.AllocatorSettings[len(s.AllocatorSettings)-1])
				}
				return
			}
			if err == nil || !errors.Is(err, ErrNotSnapshot) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an ErrNotSnapshot saying %q", err, c.want)
			}
			m := atByte.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("%v names no byte", err)
			}
			at, _ := strconv.ParseInt(m[1], 10, 64)
			if at <= 0 || at > c.atMost {
				t.Errorf("refused at byte %d of %d, want by %d: %v", at, len(c.data), c.atMost, err)
			}
		})
	}
}

// shortString writes s (under 256 bytes) as protocol 4's
// SHORT_BINUNICODE: the opcode, its length in a byte, its bytes.
func shortString(b *bytes.Buffer, s string) {
	b.WriteByte(0x8c)
	b.WriteByte(byte(len(s)))
	b.WriteString(s)
}

// stringList is a list of n distinct short strings ("0", "1"...), each
// memoised, in APPENDS batches of 1000, as CPython's pickle.dumps(protocol=4)
// writes it.
func stringList(n int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x04]\x94")
	for i := range n {
		if i%1000 == 0 {
			b.WriteByte('(')
		}
		shortString(&b, strconv.Itoa(i))
		b.WriteByte(0x94)
		if i%1000 == 999 || i == n-1 {
			b.WriteByte('e')
		}
	}
	b.WriteString(".")
	return b.Bytes()
}

// TestStringListCostsItsBytes: a list of millions of distinct strings, no
// snapshot, is refused as its items pass their share of the bytes read (one
// per 16 bytes beyond 64 Ki): within its first 2 MiB, having allocated at
// most 40 MB (32 MiB of memo, items and strings) of its 23 MB. Before the
// bound it was read whole: 284 MB allocated, 12.4 a byte.
func TestStringListCostsItsBytes(t *testing.T) {
	err := refusedWithin(t, "a list of strings", stringList(2_400_000), "a memory snapshot's lists hold records", 40_000_000)
	m := atByte.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("%v names no byte", err)
	}
	if at, _ := strconv.ParseInt(m[1], 10, 64); at <= 0 || at > 2<<20 {
		t.Errorf("refused at byte %s, want within the first 2 MiB", m[1])
	}
}

// refusedWithin decodes data, what the test names it, and wants it refused
// as not a snapshot with an error that says want, having allocated at most
// limit bytes in all; it returns the error.
func refusedWithin(t *testing.T, what string, data []byte, want string, limit uint64) error {
	t.Helper()
	var err error
	n := pickletest.Allocated(func() { _, err = Decode(bytes.NewReader(data), DefaultLimits, nil) })
	if !errors.Is(err, ErrNotSnapshot) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s read as %v, want refused: %q", what, err, want)
	}
	t.Logf("%d bytes, %d allocated (%.1f a byte): %v", len(data), n, float64(n)/float64(len(data)), err)
	if n > limit {
		t.Errorf("%d bytes allocated %d, over %d", len(data), n, limit)
	}
	return err
}

// memoisedStrings is n distinct short strings, each memoised and popped:
// all the file leaves is the memo.
func memoisedStrings(n int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x04")
	for i := range n {
		shortString(&b, strconv.Itoa(i))
		b.WriteString("\x940")
	}
	b.WriteString("N.")
	return b.Bytes()
}

// TestMemoOfStringsCostsWords: the memo keeps short strings as a 4-byte
// word and their bytes in an arena, not as 24-byte values: 2.4 M distinct
// strings memoised and popped (25 MB) allocate at most 66 MB in all, the
// strings read included (87 MB before: a 24-byte value each).
func TestMemoOfStringsCostsWords(t *testing.T) {
	refusedWithin(t, "2.4 M memoised strings", memoisedStrings(2_400_000), "holds a None", 66_000_000)
}

// TestMemoWords: what the memo keeps as words reads back as the value
// memoised; what does not pack (long strings, bytes, large ints, floats,
// containers) is not a word.
func TestMemoWords(t *testing.T) {
	d := &decoder{}
	long := strings.Repeat("x", 255)
	for _, v := range []val{
		{k: kNone}, {k: kBool}, {k: kBool, i: 1}, {k: kInt}, {k: kInt, i: -1 << 29}, {k: kInt, i: 1<<29 - 1},
		strVal("", kStr), strVal("filename", kStr), strVal(long, kStr), strVal("é\x00", kStr),
	} {
		w, ok := d.Pack(v)
		if !ok || w == 0 {
			t.Fatalf("%s %q (%d) does not pack", v.kindName(), v.str(), v.i)
		}
		if got := d.Unpack(w); got.k != v.k || got.str() != v.str() || (v.k != kStr && got.i != v.i) {
			t.Errorf("%s %q (%d) reads back as %s %q (%d)", v.kindName(), v.str(), v.i, got.kindName(), got.str(), got.i)
		}
	}
	for _, v := range []val{
		strVal(long+"x", kStr), strVal("b", kBytes), {k: kInt, i: 1 << 29}, {k: kInt, i: -1<<29 - 1},
		{k: kFloat}, {k: kUint, i: -1}, tupleVal(nil), listVal(&listB{}), dictVal(&dictB{}),
	} {
		if _, ok := d.Pack(v); ok {
			t.Errorf("%s %q (%d) packs", v.kindName(), v.str(), v.i)
		}
	}
}
