package pickle

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
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
	if d.wordTab != nil {
		t.Errorf("a table made for keys that came in order")
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
