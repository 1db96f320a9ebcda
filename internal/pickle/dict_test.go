package pickle

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vramguard/vramguard/internal/pickle/pickletest"
)

// refDict is a dict as Python keeps it, by a linear search: an int and the
// bool it equals are one key, -0.0 is 0.0, a NaN equals nothing, and (as
// the reader has it) keys other than strings, ints, bools and floats are
// never merged.
type refDict struct{ keys, vals []any }

func refCanon(k any) (string, bool) {
	switch x := k.(type) {
	case string:
		return "s" + x, true
	case int64:
		return fmt.Sprint("i", x), true
	case bool:
		if x {
			return "i1", true
		}
		return "i0", true
	case float64:
		if x != x {
			return "", false
		}
		if x == 0 {
			x = 0
		}
		return fmt.Sprint("f", math.Float64bits(x)), true
	}
	return "", false
}

func (r *refDict) set(k, v any) {
	if c, ok := refCanon(k); ok {
		for i, e := range r.keys {
			if ec, _ := refCanon(e); ec == c {
				r.vals[i] = v
				return
			}
		}
	}
	r.keys = append(r.keys, k)
	r.vals = append(r.vals, v)
}

func sameItem(a, b any) bool {
	if fa, ok := a.(float64); ok {
		fb, ok := b.(float64)
		return ok && (fa == fb || fa != fa && fb != fb)
	}
	switch a.(type) {
	case Tuple, *List:
		return fmt.Sprintf("%p", a) == fmt.Sprintf("%p", b) || fmt.Sprint(a) == fmt.Sprint(b)
	}
	return a == b
}

// TestDictKeysAsPython: a Dict keeps the items a Python dict keeps, in its
// order, whatever the mix of keys (packed ints in order and out of order,
// ints past 30 bits, bools, floats, strings, None, tuples) and values.
func TestDictKeysAsPython(t *testing.T) {
	keyOf := func(r *rand.Rand, i int) any {
		switch r.Intn(10) {
		case 0:
			return int64(r.Intn(50))
		case 1:
			return r.Intn(2) == 1
		case 2:
			return int64(1<<40 + r.Intn(20))
		case 3:
			return []float64{0, math.Copysign(0, -1), 1.5, math.NaN(), 1}[r.Intn(5)]
		case 4:
			return fmt.Sprint("k", r.Intn(30))
		case 5:
			return None{}
		case 6:
			return Tuple{int64(r.Intn(3))}
		case 7:
			return int64(-r.Intn(1 << 29))
		}
		return int64(i) // mostly increasing
	}
	valOf := func(r *rand.Rand) any {
		return []any{None{}, true, int64(r.Intn(1 << 31)), "v", int64(-3), &List{}, 2.5}[r.Intn(7)]
	}
	for _, tc := range []struct {
		name  string
		seed  int64
		items int
	}{
		{"few", 1, 20},
		{"one page", 2, 3000},
		{"several pages", 3, 10_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(tc.seed))
			d, ref := NewDict(), &refDict{}
			for i := range tc.items {
				k, v := keyOf(r, i), valOf(r)
				d.Set(k, v)
				ref.set(k, v)
			}
			if d.Len() != len(ref.keys) {
				t.Fatalf("Len %d, want %d", d.Len(), len(ref.keys))
			}
			for i := range ref.keys {
				if !sameItem(d.Key(i), ref.keys[i]) || !sameItem(d.Val(i), ref.vals[i]) {
					t.Fatalf("item %d: %v: %v, want %v: %v", i, d.Key(i), d.Val(i), ref.keys[i], ref.vals[i])
				}
			}
		})
	}
	// Int keys in order, then each again: no table while in order, one
	// made at the first key out of order, and every key found in it.
	d := NewDict()
	const n = 50_000
	for i := range n {
		d.Set(int64(i), None{})
	}
	if d.ix != nil {
		t.Errorf("an index made for keys that came in order")
	}
	for i := n - 1; i >= 0; i-- {
		d.Set(int64(i), int64(i)*3)
	}
	d.Set(true, "one")
	if d.Len() != n {
		t.Fatalf("Len %d, want %d", d.Len(), n)
	}
	for i := range n {
		want := any(int64(i) * 3)
		if i == 1 {
			want = "one"
		}
		if d.Key(i) != any(int64(i)) || d.Val(i) != want {
			t.Fatalf("item %d: %v: %v", i, d.Key(i), d.Val(i))
		}
	}
	if v, ok := NewDict("a", int64(1), "b", None{}, "a", int64(2)).Get("a"); !ok || v != any(int64(2)) {
		t.Errorf(`Get("a") = %v, %v; want the later 2`, v, ok)
	}
}

// TestMemoPacked: values the memo keeps as words (None, bools, small ints)
// read back as what was memoised, beside values it keeps as they are.
func TestMemoPacked(t *testing.T) {
	in := "\x80\x04N\x94\x88\x94\x89\x94K\x07\x94J\x00\x00\x00\xe0\x94J\xff\xff\xff\x1f\x94J\x00\x00\x00\x20\x94X\x01\x00\x00\x00s\x94" +
		"(h\x00h\x01h\x02h\x03h\x04h\x05h\x06h\x07t."
	res, err := DecodeBytes([]byte(in), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(res.Value)
	if want := "[{} true false 7 -536870912 536870911 536870912 s]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestIntKeysOutOfOrder: int keys out of order find the item they repeat,
// whether the index is the bitmap of a dense range or the table; a range
// written shuffled costs its keys' and values' words and a bitmap (at most
// 10 bytes a key in all, where the table alone took 16), and the table is
// made only for keys too sparse for the bitmap or a key seen twice.
func TestIntKeysOutOfOrder(t *testing.T) {
	const n = 1 << 20
	perm := func(seed int64, f func(int) int64) []int64 {
		ks := make([]int64, n)
		for i, p := range rand.New(rand.NewSource(seed)).Perm(n) {
			ks[i] = f(p)
		}
		return ks
	}
	ident := func(i int) int64 { return int64(i) }
	shuffled := perm(1, ident)
	for _, tc := range []struct {
		name     string
		keys     []int64
		table    bool // the table made, not the bitmap
		perKey   float64
		repeated bool
	}{
		{"shuffled range", shuffled, false, 10, false},
		{"shuffled range below zero", perm(2, func(i int) int64 { return -int64(i) - 1 }), false, 10, false},
		{"descending", func() []int64 {
			ks := make([]int64, n)
			for i := range ks {
				ks[i] = int64(n - i)
			}
			return ks
		}(), false, 10, false},
		{"in order after one out of order", append([]int64{5, 3}, func() []int64 {
			ks := make([]int64, n)
			for i := range ks {
				ks[i] = int64(6 + i)
			}
			return ks
		}()...), false, 10, false},
		{"sparse", perm(3, func(i int) int64 { return int64(i) * 100 }), true, 0, false},
		{"shuffled range, then again", append(append([]int64(nil), shuffled...), perm(4, ident)...), true, 0, true},
		{"a repeat at the first key out of order", append([]int64{1, 7, 1}, shuffled[:1000]...), true, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := make([]any, len(tc.keys))
			for i, k := range tc.keys {
				keys[i] = k
			}
			if tc.name == "a repeat at the first key out of order" {
				keys[2] = true // the bool True is the key 1
			}
			d := NewDict()
			got := pickletest.Allocated(func() {
				for i, k := range keys {
					d.Set(k, int64(i%200))
				}
			})
			pos := map[int64]int{}
			var order []int64
			last := map[int64]int64{}
			for i, k := range tc.keys {
				if _, ok := pos[k]; !ok {
					pos[k] = len(order)
					order = append(order, k)
				}
				last[k] = int64(i % 200)
			}
			if d.Len() != len(order) {
				t.Fatalf("Len %d, want %d", d.Len(), len(order))
			}
			for i, k := range order {
				if kk, _ := d.Key(i).(int64); kk != k && !(k == 1 && d.Key(i) == true) {
					t.Fatalf("key %d is %v, want %d", i, d.Key(i), k)
				}
				if d.Val(i) != any(last[k]) {
					t.Fatalf("item %d (key %d) is %v, want %d", i, k, d.Val(i), last[k])
				}
			}
			if d.ix == nil {
				t.Fatal("no index made for keys out of order")
			}
			if (d.ix.tab != nil) != tc.table || (d.ix.seen != nil) == tc.table {
				t.Errorf("table %v, bitmap %v; want the table %v", d.ix.tab != nil, d.ix.seen != nil, tc.table)
			}
			if d.ix.repeated != tc.repeated {
				t.Errorf("repeated %v, want %v", d.ix.repeated, tc.repeated)
			}
			if tc.perKey > 0 && float64(got) > tc.perKey*float64(len(keys)) {
				t.Errorf("%d keys allocate %d bytes, over %v a key", len(keys), got, tc.perKey)
			}
			t.Logf("%d keys: %d bytes allocated (%.1f a key)", len(keys), got, float64(got)/float64(len(keys)))
		})
	}
}
