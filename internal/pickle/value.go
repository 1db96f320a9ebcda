// Package pickle is vramguard's one reader of Python pickles (protocols 0 to
// 5). Nothing is imported, looked up or run: a Machine reads the opcodes and
// their operands (as CPython's C unpickler reads them), keeps the stack, the
// marks and a sparse memo, and bounds everything a file can make it hold in
// proportion to the bytes read (Limits); a Builder says what each value is.
//
// Two views use it. Decode builds a symbolic tree, what checkpoints are
// scanned and inspected through: a global reference becomes a Global value,
// a call (REDUCE, NEWOBJ, INST, OBJ) becomes a Call node that records what
// would have been called and with what, and BUILD records the state it would
// have set. Inputs that break a bound or the pickle grammar are rejected with
// an error that says where; the globals seen up to that point are still
// returned so a scanner can report them. The snapshot package builds its
// typed model through its own Builder and refuses anything but plain data.
//
// Walks over a decoded tree must bound their depth and remember what they
// have visited: a memoised container may hold itself.
package pickle

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// None is Python's None.
type None struct{}

// Tuple is a Python tuple.
type Tuple []any

// List is a Python list; a pointer so APPEND through the memo is seen by
// every reference, as in Python.
type List struct{ Items []any }

// Dict is a Python dict with its insertion order kept. Its items are kept
// compactly (a few bytes per item for the small scalars dicts of millions
// of items hold): read them with Len, Key and Val.
type Dict struct {
	keys, vals paged[uint32] // packed words (packScalar) or indices into refs
	refs       paged[any]    // keys and values that are not small scalars
	// The positions of the scalar keys, so SETITEM stays O(1). An int
	// key that packs in a word (most keys of a dict of millions; a bool is
	// the int it equals, as a Python dict has it) is found in ix.tab, an
	// open-addressing table probed as CPython probes a dict (the int is its
	// own hash, so consecutive keys take consecutive slots); any other int,
	// a float's bits and a string in a map. Other keys are not
	// deduplicated, which keeps decoding linear and is what a report needs.
	// While the int keys come in increasing order (as a dict built in
	// order is written) none can repeat one before, and no index is made.
	// While they are out of order but dense (a range written shuffled, as
	// a dict built from shuffled keys is), a bitmap of the keys seen, of
	// at most 4 bytes a key, says whether a key is new: a pickler never
	// repeats a key, and only at a key seen before (or keys too sparse for
	// the bitmap) is the table made. The bitmap of a million keys fits a
	// processor's cache, where the table's slots are a cache miss each.
	ix       *intIndex // nil while the int keys come in order
	nWord    int
	loWord   int32 // the least and the greatest int key
	hiWord   int32
	intIdx   map[int64]int32
	floatIdx map[uint64]int32
	strIdx   map[string]int32
}

// intIndex finds a dict's int keys that pack once they are out of order:
// seen, a bitmap of the keys from seenLo, or tab, the table (position+1, 0
// for an empty slot).
type intIndex struct {
	tab      []int32
	seen     []uint64
	seenLo   int64
	repeated bool // an int key came again: the table from then on
}

// NewDict makes a dict of the items kv (key, value, key, value, ...), a
// later key replacing an earlier equal one.
func NewDict(kv ...any) *Dict {
	d := &Dict{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

// Len is the count of items.
func (d *Dict) Len() int { return d.keys.len() }

// Key is the key of item i.
func (d *Dict) Key(i int) any { return d.word(d.keys.at(i)) }

// Val is the value of item i.
func (d *Dict) Val(i int) any { return d.word(d.vals.at(i)) }

// String renders the first items, as {key: value, ...}: scalars as
// themselves, anything else by its type (so a dict holding itself prints).
func (d *Dict) String() string {
	var b strings.Builder
	b.WriteString("{")
	for i := range min(d.Len(), 16) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(KeyString(d.Key(i)))
		b.WriteString(": ")
		switch v := d.Val(i).(type) {
		case string, int64, bool, float64, None:
			b.WriteString(KeyString(v))
		default:
			fmt.Fprintf(&b, "<%T>", v)
		}
	}
	if d.Len() > 16 {
		fmt.Fprintf(&b, ", ... (%d items)", d.Len())
	}
	b.WriteString("}")
	return b.String()
}

// Set sets key k to v: it replaces the value of an equal scalar key, or
// adds an item.
func (d *Dict) Set(k, v any) { d.set(k, v) }

// word unpacks a packed word.
func (d *Dict) word(w uint32) any {
	if v, ok := unpackScalar(w); ok {
		return v
	}
	return d.refs.at(int(w >> 2))
}

// pack packs v, keeping it in refs when it is no small scalar; old is the
// word v replaces (its slot in refs is reused), 0 when none.
func (d *Dict) pack(v any, old uint32) uint32 {
	if w, ok := packScalar(v); ok {
		return w
	}
	if old != 0 {
		if _, ok := unpackScalar(old); !ok {
			d.refs.set(int(old>>2), v)
			return old
		}
	}
	j := d.refs.len()
	d.refs.append(v)
	return uint32(j) << 2
}

// keyWord is the packed word of an int or bool key, when it packs.
func keyWord(k any) (uint32, bool) {
	switch x := k.(type) {
	case int64:
		return packScalar(x)
	case bool:
		if x {
			return packScalar(int64(1))
		}
		return packScalar(int64(0))
	}
	return 0, false
}

// wordFind returns the position of the item whose key packs to w, or the
// empty slot of wordTab where it goes (pos -1).
func (d *Dict) wordFind(w uint32) (pos, slot int) {
	mask := uint64(len(d.ix.tab) - 1)
	h := uint64(int64(int32(w) >> 2))
	perturb := h
	for i := h & mask; ; {
		e := d.ix.tab[i]
		if e == 0 {
			return -1, int(i)
		}
		if normWord(d.keys.at(int(e-1))) == w {
			return int(e - 1), int(i)
		}
		perturb >>= 5
		i = (5*i + perturb + 1) & mask
	}
}

// normWord is a packed key as the int it equals (a bool's word as 0 or 1).
func normWord(w uint32) uint32 {
	switch w {
	case wordFalse:
		return 0<<2 | tagInt
	case wordTrue:
		return 1<<2 | tagInt
	}
	return w
}

// growWords makes wordTab room for one more int key (its load stays at
// most 2/3, as CPython's): doubled, or made when it is first needed. The
// table is filled from the keys in their order, not from the old table: the
// keys are read in sequence and each goes to the first empty slot of its
// probe (the int keys of a dict are distinct), so a grow costs one random
// write a key, not a read of the key each old slot points at as well.
func (d *Dict) growWords() {
	n := max(2*len(d.ix.tab), 8)
	for 3*(d.nWord+1) > 2*n {
		n *= 2
	}
	d.ix.tab = make([]int32, n)
	mask := uint64(n - 1)
	for i := range d.keys.len() {
		w := normWord(d.keys.at(i))
		if w&3 != tagInt {
			continue
		}
		h := uint64(int64(int32(w) >> 2))
		perturb := h
		j := h & mask
		for d.ix.tab[j] != 0 {
			perturb >>= 5
			j = (5*j + perturb + 1) & mask
		}
		d.ix.tab[j] = int32(i + 1)
	}
}

// find returns the position of the item whose key equals k (-1 when none)
// and whether k is a key that is indexed.
func (d *Dict) find(k any) (int, bool) {
	var i int32
	ok := false
	switch x := k.(type) {
	case string:
		i, ok = d.strIdx[x]
	case float64:
		if x != x {
			return -1, false // NaN equals nothing
		}
		i, ok = d.floatIdx[floatKey(x)]
	case int64:
		i, ok = d.intIdx[x]
	default:
		return -1, false
	}
	if !ok {
		return -1, true
	}
	return int(i), true
}

// floatKey is a float key's bits, -0.0 as 0.0.
func floatKey(x float64) uint64 {
	if x == 0 {
		return 0
	}
	return math.Float64bits(x)
}

// index records that the key k of an indexed kind is at position n.
func (d *Dict) index(k any, n int32) {
	switch x := k.(type) {
	case string:
		putIndex(&d.strIdx, x, n)
	case float64:
		putIndex(&d.floatIdx, floatKey(x), n)
	case int64:
		putIndex(&d.intIdx, x, n)
	}
}

func putIndex[K comparable](m *map[K]int32, k K, n int32) {
	if *m == nil {
		*m = map[K]int32{}
	}
	(*m)[k] = n
}

func (d *Dict) set(k, v any) {
	n := d.keys.len()
	if w, ok := keyWord(k); ok {
		if pos := d.findWord(w); pos >= 0 {
			d.vals.set(pos, d.pack(v, d.vals.at(pos)))
			return
		}
		if x := int32(w) >> 2; d.nWord == 0 {
			d.loWord, d.hiWord = x, x
		} else {
			d.loWord, d.hiWord = min(d.loWord, x), max(d.hiWord, x)
		}
		d.nWord++
	} else if pos, indexed := d.find(k); pos >= 0 {
		d.vals.set(pos, d.pack(v, d.vals.at(pos)))
		return
	} else if indexed {
		d.index(k, int32(n))
	}
	d.keys.append(d.pack(k, 0))
	d.vals.append(d.pack(v, 0))
}

// findWord returns the position of the item whose int key packs to w, or
// -1 when there is none: then the key is recorded as the next item's (in
// the bitmap or the table, whichever is in use).
func (d *Dict) findWord(w uint32) int {
	x := int32(w) >> 2
	if d.ix == nil {
		if d.nWord == 0 || x > d.hiWord {
			return -1 // in order: a new key
		}
		d.ix = &intIndex{}
	}
	if d.ix.tab == nil && !d.seenHolds(x) || d.ix.tab != nil && 3*(d.nWord+1) > 2*len(d.ix.tab) {
		d.reindex(x)
	}
	if d.ix.seen != nil {
		b := int64(x) - d.ix.seenLo
		if d.ix.seen[b>>6]&(1<<(b&63)) == 0 {
			d.ix.seen[b>>6] |= 1 << (b & 63)
			return -1
		}
		d.ix.repeated = true // a key again: where it is, only the table says
		d.reindex(x)
	}
	pos, slot := d.wordFind(w)
	if pos < 0 {
		d.ix.tab[slot] = int32(d.keys.len() + 1)
	}
	return pos
}

// seenHolds says whether the bitmap has a bit for x.
func (d *Dict) seenHolds(x int32) bool {
	b := int64(x) - d.ix.seenLo
	return d.ix.seen != nil && b >= 0 && b < 64*int64(len(d.ix.seen))
}

// seenPerKey bounds the bitmap: its span of keys (twice the range of the
// keys so far, so it is remade a few times as the range grows, not at each
// key past its end) is at most 32 bits, 4 bytes, a key.
const seenPerKey = 32

// reindex remakes the index of the int keys so far, to hold one more, x:
// a bitmap while they are dense and none came twice, else the table. Both
// are filled from the keys in their order (the int keys of a dict are
// distinct): a bitmap bit or a table write a key.
func (d *Dict) reindex(x int32) {
	lo, hi := int64(min(d.loWord, x)), int64(max(d.hiWord, x))
	if d.nWord == 0 {
		lo, hi = int64(x), int64(x)
	}
	if span := hi - lo + 1; !d.ix.repeated && 2*span <= seenPerKey*int64(d.nWord+1)+128 {
		// room on the side the keys grow to: below, when x is the least
		if x == int32(lo) && d.nWord > 0 {
			lo = hi + 1 - 2*span
		}
		lo &^= 63
		d.ix.seenLo, d.ix.seen, d.ix.tab = lo, make([]uint64, (2*span+127)/64), nil
		for i := range d.keys.len() {
			if w := normWord(d.keys.at(i)); w&3 == tagInt {
				b := int64(int32(w)>>2) - lo
				d.ix.seen[b>>6] |= 1 << (b & 63)
			}
		}
		return
	}
	d.ix.seen = nil
	d.growWords()
}

// paged is a slice kept in pages of pageLen items: the first grows as a
// slice does, the others are made whole, so it never holds more than a page
// beyond its items and never copies a full page.
type paged[T any] struct {
	p [][]T
	n int
}

const pageLen = 1 << 12

func (s *paged[T]) len() int   { return s.n }
func (s *paged[T]) at(i int) T { return s.p[i/pageLen][i%pageLen] }
func (s *paged[T]) set(i int, v T) {
	s.p[i/pageLen][i%pageLen] = v
}

func (s *paged[T]) append(v T) {
	if s.n%pageLen == 0 && s.n/pageLen == len(s.p) {
		var p []T
		if s.n > 0 {
			p = make([]T, 0, pageLen)
		}
		s.p = append(s.p, p)
	}
	last := &s.p[len(s.p)-1]
	if len(*last) == cap(*last) && len(*last) > 0 {
		nl := make([]T, len(*last), min(2*cap(*last), pageLen))
		copy(nl, *last)
		*last = nl
	}
	*last = append(*last, v)
	s.n++
}

// Packed small scalars: what millions of dict items and memo entries
// mostly are, kept in 4 bytes rather than an interface and its box. A word
// is 0 for none; tagInt holds an int of 30 bits; tagConst None, False or
// True.
const (
	tagRef   = 0
	tagInt   = 1
	tagConst = 2
)

const (
	wordNone  = 0<<2 | tagConst
	wordFalse = 1<<2 | tagConst
	wordTrue  = 2<<2 | tagConst
)

// packScalar packs v when it is None, a bool or an int of 30 bits.
func packScalar(v any) (uint32, bool) {
	switch x := v.(type) {
	case None:
		return wordNone, true
	case bool:
		if x {
			return wordTrue, true
		}
		return wordFalse, true
	case int64:
		if x >= -1<<29 && x < 1<<29 {
			return uint32(int32(x))<<2 | tagInt, true
		}
	}
	return 0, false
}

// unpackScalar is the value of a packed word (false for a reference).
func unpackScalar(w uint32) (any, bool) {
	switch w & 3 {
	case tagInt:
		return int64(int32(w) >> 2), true
	case tagConst:
		switch w {
		case wordNone:
			return None{}, true
		case wordFalse:
			return false, true
		case wordTrue:
			return true, true
		}
	}
	return nil, false
}

// Set is a Python set or frozenset.
type Set struct {
	Items  []any
	Frozen bool
}

// Bytes is a Python bytes or bytearray value.
type Bytes []byte

// Buffer is an out-of-band buffer (protocol 5 NEXT_BUFFER).
type Buffer struct{ Index int }

// Global is a reference to module.name (GLOBAL, STACK_GLOBAL, INST).
type Global struct {
	Module, Name string
}

func (g Global) String() string { return g.Module + "." + g.Name }

// PersID is a persistent id (PERSID, BINPERSID): torch uses it for storages.
type PersID struct{ ID any }

// Call is what the unpickler would have called: Func(*Args, **Kwargs), then
// __setstate__(State) or __dict__.update(State) from BUILD, then the items
// APPENDS/SETITEMS added to the result.
type Call struct {
	Func   any
	Args   Tuple
	Kwargs *Dict // NEWOBJ_EX only
	// ArgsValue and KwargsValue are the arguments when they are not a
	// plain tuple and dict but what a call returned (a torch.Size, an
	// OrderedDict): CPython takes a tuple's or a dict's subclass there
	// and goes on.
	ArgsValue, KwargsValue any
	New                    bool // cls.__new__ (NEWOBJ) rather than a call
	State                  any  // from BUILD; nil when none
	HasState               bool
	ListItems              []any
	DictItems              *Dict
}

// Build is one BUILD opcode: Target is what it acts on (a *Call, a
// Global, a container), as the stack held it.
type Build struct {
	Offset int64
	Target any
}

// PersIDRef is one PERSID or BINPERSID opcode and the id it passes to the
// loader's persistent_load.
type PersIDRef struct {
	Offset int64
	ID     any
}

// Ext is an extension-registry code (EXT1/2/4); it cannot be resolved here.
type Ext struct{ Code int32 }

// BigInt is an integer that does not fit int64.
type BigInt struct{ *big.Int }

// Func returns the Global a call refers to, when it refers to one directly.
func (c *Call) Global() (Global, bool) {
	g, ok := c.Func.(Global)
	return g, ok
}

// Get returns the value for a string key.
func (d *Dict) Get(key string) (any, bool) {
	if i, ok := d.strIdx[key]; ok {
		return d.Val(int(i)), true
	}
	return nil, false
}

// KeyString renders a dict key or sequence index as a path element.
func KeyString(k any) string { return keyString(k, 0) }

func keyString(k any, depth int) string {
	if depth > 8 {
		return "..."
	}
	switch v := k.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case bool:
		if v {
			return "True"
		}
		return "False"
	case float64:
		return fmt.Sprint(v)
	case None:
		return "None"
	case Bytes:
		return string(v)
	case Tuple:
		s := "("
		for i, e := range v {
			if i > 0 {
				s += ","
			}
			if i >= 16 {
				s += "..."
				break
			}
			s += keyString(e, depth+1)
		}
		return s + ")"
	default:
		return fmt.Sprintf("<%T>", k)
	}
}
