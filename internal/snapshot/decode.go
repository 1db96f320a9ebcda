package snapshot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unsafe"

	"github.com/vramguard/vramguard/internal/pickle"
)

// Limits bound one decode: what a file can make the decoder hold.
type Limits struct {
	MaxString int64 // one string or bytes value
	MaxMemo   int   // memo entries
	MaxStack  int   // values on the stack
	MaxDepth  int   // nested MARKs
}

// DefaultLimits fit snapshots of a long history with deep stacks (a few
// GiB of pickle) and stop a file that claims more.
var DefaultLimits = Limits{MaxString: 64 << 20, MaxMemo: 200_000_000, MaxStack: 50_000_000, MaxDepth: 1000}

// ErrNotSnapshot is wrapped by every error that says the file is not a
// memory snapshot (as opposed to one that could not be read).
var ErrNotSnapshot = errors.New("not a snapshot")

// kind is what a stack value holds.
type kind uint8

const (
	kNone  kind = iota
	kInt        // i
	kUint       // i holds uint64 bits >= 2^63
	kBig        // beyond 64 bits: i is the saturated value
	kFloat      // i holds float64 bits
	kBool       // i is 0 or 1
	kStr        // s
	kBytes      // s
	kTuple      // p is []val
	kDict       // p is *dictB
	kList       // p is *listB
	kMark
	kTyped // p is a model value (i: which, tag*): what the memo and lists hold for a typed dict
)

// val is one pickle value, 24 bytes: the memo of a large snapshot holds
// millions. Containers are pointers, so the memo and the stack share them as
// Python does; a string's bytes are p with length i.
type val struct {
	p unsafe.Pointer
	i int64
	k kind
}

func strVal(s string, k kind) val {
	return val{p: unsafe.Pointer(unsafe.StringData(s)), i: int64(len(s)), k: k}
}

// str is the string of a kStr or kBytes value ("" for any other).
func (v val) str() string {
	if (v.k != kStr && v.k != kBytes) || v.i == 0 {
		return ""
	}
	return unsafe.String((*byte)(v.p), int(v.i))
}

func (v val) dict() *dictB {
	if v.k != kDict {
		return nil
	}
	return (*dictB)(v.p)
}

func (v val) list() *listB {
	if v.k != kList {
		return nil
	}
	return (*listB)(v.p)
}

func (v val) tuple() []val {
	if v.k != kTuple || v.p == nil {
		return nil
	}
	return *(*[]val)(v.p)
}

func tupleVal(t []val) val { return val{p: unsafe.Pointer(&t), k: kTuple} }
func dictVal(d *dictB) val { return val{p: unsafe.Pointer(d), k: kDict} }
func listVal(l *listB) val { return val{p: unsafe.Pointer(l), k: kList} }

// dictB is a dict as it is built. A dict whose keys name a model type (a
// frame, block, segment, trace entry, history entry) becomes that type at
// its first items and takes later ones directly; any other keeps its items
// (key, value, key, value...).
type dictB struct {
	kv     []val
	typed  any // *Frame, *Block, *Segment, *TraceEntry, *History; nil for a plain dict
	sealed bool
	n      int32  // items set, typed or not (at most maxDictItems)
	memo   uint64 // 1 + its memo index; 0 when not memoised
}

// claim says whether l has no owner yet, and makes it owned: a list a
// snapshot gives to one owner (a segment's blocks, a block's history) that
// a file gives to two is walked once and named in d.shared.
func (d *decoder) claim(l *listB, what string) bool {
	if l.claimed {
		d.shared = what
		return false
	}
	l.claimed = true
	return true
}

// listB is a list as it is built. A list of frames holds them as a Stack
// from the start, so a stack costs a pointer per frame, as in the file.
type listB struct {
	items   []val
	st      Stack
	frames  bool // items went to st.Frames
	counted bool // counted in Snapshot.Stacks
	claimed bool // taken by an owner (see claim)
	n       int  // items appended, of either kind
}

type decoder struct {
	lim      Limits
	m        *pickle.Machine[val]
	strs     map[string]string // short strings, interned
	contexts map[TraceContext]*TraceContext
	tab      *frameTable
	// lastContext is the trace context met last: entries in a row share it
	lastContext *TraceContext
	snap        *Snapshot
	frames      int
	stacks      int
	// blockAddrs: a block carried its address (torch >= 2.1)
	blockAddrs bool
	// shared names a list the file gives two owners (the blocks of two
	// segments, the history of two blocks): a snapshot never does, and
	// walking it once per owner is what a hostile file would want
	shared string
	// refused is why the schema refuses what the file holds
	refused error
	// off is where a JSON error is (the pickle machine reports its own)
	off int64
	// kept is the items plain dicts took, all together (see count)
	kept int64
	// listKept is the items lists took as values (not as frames), all
	// together (see keepListItems)
	listKept int64
	// jsonRead is the bytes of a JSON file read so far
	jsonRead int64
	// arena holds the short strings the memo keeps (see Pack)
	arena [][]byte
}

// countReader counts the bytes read through it into *n.
type countReader struct {
	r io.Reader
	n *int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// pickleLimits are the reader's bounds for a snapshot's pickle: no bound on
// its length (snapshots of a long history are GiBs), the rest from lim and
// in proportion to the bytes read.
func pickleLimits(lim Limits) pickle.Limits {
	return pickle.Limits{
		MaxBytes:  math.MaxInt64,
		MaxOps:    math.MaxInt,
		MaxMemo:   lim.MaxMemo,
		MaxStack:  lim.MaxStack,
		MaxMarks:  lim.MaxDepth,
		MaxDepth:  lim.MaxDepth,
		MaxString: lim.MaxString,
		// a snapshot's values are dicts and keys of tens of bytes each:
		// a real one is far inside these
		Slack:        1 << 16,
		BytesPer:     8,
		MemoBytesPer: 4,
	}
}

// Decode reads a snapshot from r: a pickle (protocol 2 to 5, as
// torch.cuda.memory._dump_snapshot or the C++ writer wrote it) or the same
// schema as JSON. progress, when not nil, is called with the bytes read so
// far every few MiB.
func Decode(r io.Reader, lim Limits, progress func(int64)) (*Snapshot, error) {
	d := &decoder{lim: lim, strs: map[string]string{}, contexts: map[TraceContext]*TraceContext{}, tab: &frameTable{}, snap: &Snapshot{}}
	br := bufio.NewReaderSize(r, 256<<10)
	head, err := br.Peek(1)
	if err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%w: the file is empty", ErrNotSnapshot)
		}
		return nil, fmt.Errorf("read: %w", err)
	}
	var root val
	switch {
	case head[0] == 0x80:
		d.m = pickle.NewMachine[val](br, 0, -1, pickleLimits(lim), d, progress)
		root, err = d.m.Run()
		if err != nil {
			if d.refused != nil {
				// what the file holds, said as the schema says it
				return nil, fmt.Errorf("%w: %v (at byte %d)", ErrNotSnapshot, d.refused, d.m.OpPos())
			}
			return nil, fmt.Errorf("%w: %v", ErrNotSnapshot, err)
		}
	case isJSONStart(head[0]):
		root, err = d.runJSON(countReader{br, &d.jsonRead}, progress)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: neither a pickle (protocol 2 to 5) nor JSON (first byte 0x%02x)", ErrNotSnapshot, head[0])
	}
	if err := d.build(root); err != nil {
		return nil, err
	}
	d.snap.Frames, d.snap.Stacks = d.frames, d.stacks
	return d.snap, nil
}

func (d *decoder) errf(format string, a ...any) error {
	at := d.off
	if d.m != nil {
		at = d.m.OpPos()
	}
	return fmt.Errorf("%w: %s (at byte %d)", ErrNotSnapshot, fmt.Sprintf(format, a...), at)
}

// plain is the error for anything a snapshot, plain data only, never holds.
func (d *decoder) plain(what string) error {
	d.refused = fmt.Errorf("it holds %s, and a memory snapshot holds plain data only", what)
	return d.refused
}

// The decoder is the pickle reader's Builder for the snapshot's schema: it
// makes plain values, types dicts as they fill, and refuses the rest.

func (d *decoder) Proto(p int) error {
	if p < 2 || p > 5 {
		return fmt.Errorf("pickle protocol %d (snapshots are protocol 2 to 5)", p)
	}
	return nil
}

func (d *decoder) None() val { return val{k: kNone} }

func (d *decoder) Bool(b bool) val {
	if b {
		return val{k: kBool, i: 1}
	}
	return val{k: kBool}
}

func (d *decoder) Int(i int64) val     { return val{k: kInt, i: i} }
func (d *decoder) Float(f float64) val { return val{k: kFloat, i: int64(math.Float64bits(f))} }

func (d *decoder) Long(le []byte, n uint64) (val, error) {
	if le == nil && n > 0 {
		d.snap.Saturated++
		return val{k: kBig, i: math.MaxInt64}, nil
	}
	v := long(le)
	if v.k == kBig {
		d.snap.Saturated++
	}
	return v, nil
}

func (d *decoder) Parsed(op byte, _ any) (val, error) {
	if op == 'P' {
		return val{}, d.plain("a persistent id")
	}
	return val{}, fmt.Errorf("%s is not one of pickle protocols 2 to 5's plain-data opcodes", pickle.OpName(op))
}

func (d *decoder) Text(_ byte, b []byte) (val, error)  { return strVal(d.string(b), kStr), nil }
func (d *decoder) Bytes(_ byte, b []byte) (val, error) { return strVal(d.string(b), kBytes), nil }
func (d *decoder) EmptyTuple() val                     { return tupleVal(nil) }
func (d *decoder) EmptyList() val                      { return listVal(&listB{}) }
func (d *decoder) EmptySet() val                       { return listVal(&listB{}) }
func (d *decoder) EmptyDict() val                      { return dictVal(&dictB{}) }

func (d *decoder) Tuple(items []val) (val, error) {
	return tupleVal(append([]val(nil), items...)), nil
}

func (d *decoder) List(items []val) (val, error) {
	l := &listB{}
	if err := d.appendItems(l, items); err != nil {
		return val{}, err
	}
	return listVal(l), nil
}

func (d *decoder) FrozenSet(items []val) (val, error) { return d.List(items) }

func (d *decoder) Dict(items []val) (val, error) {
	db := &dictB{}
	if err := d.setItems(db, items); err != nil {
		return val{}, err
	}
	return dictVal(db), nil
}

func (d *decoder) Append(t *val, items []val) error {
	l := t.list()
	if l == nil {
		return fmt.Errorf("APPENDS on a %s", t.kindName())
	}
	return d.appendItems(l, items)
}

func (d *decoder) AddItems(t *val, items []val) error { return d.Append(t, items) }

func (d *decoder) SetItems(t *val, kv []val) error {
	db := t.dict()
	if db == nil {
		return fmt.Errorf("SETITEM on a %s", t.kindName())
	}
	return d.setItems(db, kv)
}

func (d *decoder) Global(_ byte, mod, name string) (val, error) {
	return val{}, d.plain("global " + mod + "." + name)
}

func (d *decoder) StackGlobal(m, n val) (val, error) {
	if m.k == kStr && n.k == kStr {
		return val{}, d.plain("global " + m.str() + "." + n.str())
	}
	return val{}, d.plain("a global (STACK_GLOBAL)")
}

func (d *decoder) Reduce(_, _ val) (val, error)      { return val{}, d.plain("a call (REDUCE)") }
func (d *decoder) NewObj(_, _ val) (val, error)      { return val{}, d.plain("a call (NEWOBJ)") }
func (d *decoder) NewObjEx(_, _, _ val) (val, error) { return val{}, d.plain("a call (NEWOBJ_EX)") }
func (d *decoder) Inst(_, _ string, _ []val) (val, error) {
	return val{}, d.plain("a call (INST)")
}
func (d *decoder) Obj(_ val, _ []val) (val, error)   { return val{}, d.plain("a call (OBJ)") }
func (d *decoder) Build(_ *val, _ val) error         { return d.plain("a call (BUILD)") }
func (d *decoder) PersID(_ val, _ bool) (val, error) { return val{}, d.plain("a persistent id") }
func (d *decoder) Ext(_ byte, _ int32) (val, error)  { return val{}, d.plain("an extension code (EXT)") }
func (d *decoder) NextBuffer(int) (val, error)       { return val{}, d.plain("an out-of-band buffer") }
func (d *decoder) ReadonlyBuffer(*val) error         { return d.plain("an out-of-band buffer") }

// The memo keeps None, bools, ints of 30 bits and short strings as 4-byte
// words (pickle.Packer) rather than 24-byte values: a pickler memoises
// every string it writes, and the snapshot view tells strings apart by
// their bytes alone. A word's low two bits say what it is: wordInt (the int
// above them), wordConst (None, False, True) or wordStr (the offset in the
// arena of the string's length byte and bytes).
const (
	wordInt   = 1
	wordConst = 2
	wordStr   = 3
	// arenaChunk is the size of one chunk of the arena: chunks never move,
	// so a string read back points into one; 1 GiB of them in all (the
	// 30 bits of an offset), then strings are memoised as values.
	arenaChunk = 1 << 20
	maxArena   = 1 << 30
)

// Pack makes v a memo word when it is a scalar that packs.
func (d *decoder) Pack(v val) (uint32, bool) {
	switch v.k {
	case kNone:
		return 0<<2 | wordConst, true
	case kBool:
		return uint32(1+v.i)<<2 | wordConst, true
	case kInt:
		if v.i >= -1<<29 && v.i < 1<<29 {
			return uint32(int32(v.i))<<2 | wordInt, true
		}
	case kStr:
		n := int(v.i)
		if n > 255 {
			return 0, false
		}
		c := len(d.arena) - 1
		if c < 0 || len(d.arena[c])+1+n > arenaChunk {
			if len(d.arena) >= maxArena/arenaChunk {
				return 0, false
			}
			d.arena = append(d.arena, make([]byte, 0, arenaChunk))
			c++
		}
		off := len(d.arena[c])
		d.arena[c] = append(append(d.arena[c], byte(n)), v.str()...)
		return uint32(c*arenaChunk+off)<<2 | wordStr, true
	}
	return 0, false
}

// Unpack is the value of a memo word.
func (d *decoder) Unpack(w uint32) val {
	switch w & 3 {
	case wordInt:
		return val{k: kInt, i: int64(int32(w) >> 2)}
	case wordConst:
		if w>>2 == 0 {
			return val{k: kNone}
		}
		return val{k: kBool, i: int64(w>>2) - 1}
	}
	off := int(w >> 2)
	ch, o := d.arena[off/arenaChunk], off%arenaChunk
	if ch[o] == 0 {
		return val{k: kStr}
	}
	return val{p: unsafe.Pointer(&ch[o+1]), i: int64(ch[o]), k: kStr}
}

// Memoized records where a dict is memoised, so that once typed the memo
// holds its model value.
func (d *decoder) Memoized(k uint64, v *val) {
	if db := v.dict(); db != nil {
		db.memo = k + 1
	}
}

// long decodes a little-endian two's complement integer of any width,
// saturating what does not fit 64 bits (kBig).
func long(b []byte) val {
	n := len(b)
	if n == 0 {
		return val{k: kInt}
	}
	neg := b[n-1]&0x80 != 0
	// strip sign-extension bytes
	for n > 1 && ((!neg && b[n-1] == 0) || (neg && b[n-1] == 0xff)) {
		if neg && b[n-2]&0x80 == 0 {
			break
		}
		n--
	}
	if n > 8 && !(n == 9 && !neg && b[8] == 0) {
		if neg {
			return val{k: kBig, i: math.MinInt64}
		}
		return val{k: kBig, i: math.MaxInt64}
	}
	var u uint64
	for i := min(n, 8) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if neg {
		if n < 8 {
			u |= ^uint64(0) << (8 * n)
		}
		return val{k: kInt, i: int64(u)}
	}
	if u > math.MaxInt64 {
		return val{k: kUint, i: int64(u)}
	}
	return val{k: kInt, i: int64(u)}
}

// maxInterned bounds the strings string interns: a snapshot's distinct
// short strings (files, functions, actions, states) are thousands, and a
// file of millions of distinct ones is not made to grow a table for each.
const maxInterned = 1 << 16

// string copies b, interning short strings: frame names and files repeat
// across frames that differ only in their line.
func (d *decoder) string(b []byte) string {
	if len(b) > 128 {
		return string(b)
	}
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.strs) < maxInterned {
		d.strs[s] = s
	}
	return s
}

func (v val) kindName() string {
	switch v.k {
	case kNone:
		return "None"
	case kInt, kUint, kBig:
		return "int"
	case kFloat:
		return "float"
	case kBool:
		return "bool"
	case kStr:
		return "str"
	case kBytes:
		return "bytes"
	case kTuple:
		return "tuple"
	case kDict:
		return "dict"
	case kList:
		return "list"
	case kTyped:
		return "dict"
	}
	return "mark"
}

// appendItems adds items to l: while every item is a frame, as frames
// (an id each), else as values, counted against what lists keep.
func (d *decoder) appendItems(l *listB, items []val) error {
	// the common case, a stack's frames read from the memo: one pass
	if (l.n == 0 || l.frames) && len(items) > 0 && items[0].k == kTyped && items[0].i == tagFrame {
		start := len(l.st.ids)
		if l.st.ids == nil {
			l.st.ids = make([]int32, 0, len(items))
		}
		all := true
		for _, it := range items {
			if it.k != kTyped || it.i != tagFrame {
				all = false
				break
			}
			l.st.ids = append(l.st.ids, (*Frame)(it.p).id)
		}
		if all {
			l.st.tab, l.frames = d.tab, true
			l.n += len(items)
			return nil
		}
		l.st.ids = l.st.ids[:start]
	}
	for i := range items {
		d.seal(&items[i])
		if db := items[i].dict(); db != nil {
			if v, ok := direct(db); ok {
				items[i] = v
			}
		}
	}
	if l.n == 0 || l.frames {
		all := true
		for _, it := range items {
			if _, ok := frameOf(it); !ok {
				all = false
				break
			}
		}
		if all {
			if l.st.ids == nil {
				l.st.ids = make([]int32, 0, len(items))
			}
			l.st.tab = d.tab
			for _, it := range items {
				f, _ := frameOf(it)
				l.st.ids = append(l.st.ids, f.id)
			}
			l.frames = true
			l.n += len(items)
			return nil
		}
		if l.frames { // frames, then something else: back to plain items
			if err := d.keepListItems(len(l.st.ids)); err != nil {
				return err
			}
			for _, id := range l.st.ids {
				l.items = append(l.items, val{p: unsafe.Pointer(d.tab.frames[id]), i: tagFrame, k: kTyped})
			}
			l.st.ids, l.frames = nil, false
		}
	}
	if err := d.keepListItems(len(items)); err != nil {
		return err
	}
	if cap(l.items)-len(l.items) < len(items) {
		// doubled, not append's quarter: a list of millions of items is
		// copied about once, not five times over
		grown := make([]val, len(l.items), max(2*cap(l.items), len(l.items)+len(items)))
		copy(grown, l.items)
		l.items = grown
	}
	l.items = append(l.items, items...)
	l.n += len(items)
	return nil
}

// keepListItems counts n items lists keep as values against their share
// of the bytes read (see keptBytesPer).
func (d *decoder) keepListItems(n int) error {
	d.listKept += int64(n)
	if read := d.pos(); d.listKept > keptItemsSlack+read/keptBytesPer {
		return d.refuse("lists of %d items in all after %d bytes, and a memory snapshot's lists hold records of tens of bytes each", d.listKept, read)
	}
	return nil
}

// key renders a dict key: snapshots key their dicts by str.
func key(k val) string {
	switch k.k {
	case kStr, kBytes:
		return k.str()
	case kInt, kBig, kBool:
		return strconv.FormatInt(k.i, 10)
	case kUint:
		return strconv.FormatUint(uint64(k.i), 10)
	}
	return "<" + k.kindName() + ">"
}

// The bounds on dicts. A snapshot's dicts are records of a few keys (a
// frame 3, a block 6, a segment 12, a trace entry 10; the root a few;
// allocator_settings and its roundup_power2_divisions tens), so a dict of
// more than maxDictItems items is no snapshot's, and is refused as it
// grows past it rather than built. The items plain dicts keep (the root's,
// allocator_settings', annotations', and dicts set one item at a time until
// their keys type them) are also bounded all together in proportion to the
// bytes read: a real snapshot writes each such item in tens of bytes, and a
// file of many dicts each under maxDictItems is stopped there. So are the
// items lists keep as values (24 bytes each; a stack's frames are kept as
// ids and not counted): a snapshot's lists hold records (segments, blocks,
// trace entries, history), each written in 36 bytes or more (the real
// snapshots of ../shared/corpora and their --export-json forms, whose stack
// tables are lists of ints, keep one list item per 36 bytes or more), so a
// list of millions of strings or numbers is refused as it passes its share.
const (
	maxDictItems   = 1 << 12
	keptItemsSlack = 1 << 16
	keptBytesPer   = 16 // bytes read for each item plain dicts keep, and for each lists keep
)

// pos is how many bytes of the file the decoder has read.
func (d *decoder) pos() int64 {
	if d.m != nil {
		return d.m.Pos()
	}
	return d.jsonRead
}

// refuse records why the schema refuses the file, and returns it.
func (d *decoder) refuse(format string, a ...any) error {
	d.refused = fmt.Errorf(format, a...)
	if d.m == nil {
		return fmt.Errorf("%w: %v (within the first %d bytes)", ErrNotSnapshot, d.refused, d.pos())
	}
	return d.refused
}

// count adds n items to db and to what plain dicts keep, refusing a dict
// past maxDictItems and plain items past their share of the bytes read.
func (d *decoder) count(db *dictB, n int) error {
	if int(db.n)+n > maxDictItems {
		return d.refuse("a dict of more than %d items, and a memory snapshot's dicts hold a few keys", maxDictItems)
	}
	db.n += int32(n)
	if db.typed != nil {
		return nil
	}
	d.kept += int64(n)
	if read := d.pos(); d.kept > keptItemsSlack+read/keptBytesPer {
		return d.refuse("dicts of %d items in all after %d bytes, and a memory snapshot's dicts are records of a few keys", d.kept, read)
	}
	return nil
}

func (d *decoder) setItems(db *dictB, items []val) error {
	if len(items)%2 != 0 {
		return d.errf("SETITEMS with an odd number of items")
	}
	for i := 1; i < len(items); i += 2 {
		d.seal(&items[i])
	}
	if db.typed == nil && len(db.kv) == 0 {
		db.typed = d.classify(items)
		d.retype(db)
	}
	if err := d.count(db, len(items)/2); err != nil {
		return err
	}
	if db.typed != nil {
		d.apply(db.typed, items)
		return nil
	}
	if db.sealed {
		return d.errf("a dict grew after it was used")
	}
	db.kv = append(db.kv, items...)
	return nil
}

// Tags of kTyped values.
const (
	tagFrame = iota + 1
	tagEntry
	tagBlock
	tagSegment
	tagHistory
)

// direct is the kTyped value of a typed dict: held in its place, it lets the
// dict itself go, and each of the many references to a frame reads one value.
func direct(db *dictB) (val, bool) {
	switch x := db.typed.(type) {
	case *Frame:
		return val{p: unsafe.Pointer(x), i: tagFrame, k: kTyped}, true
	case *TraceEntry:
		return val{p: unsafe.Pointer(x), i: tagEntry, k: kTyped}, true
	case *Block:
		return val{p: unsafe.Pointer(x), i: tagBlock, k: kTyped}, true
	case *Segment:
		return val{p: unsafe.Pointer(x), i: tagSegment, k: kTyped}, true
	case *History:
		return val{p: unsafe.Pointer(x), i: tagHistory, k: kTyped}, true
	}
	return val{}, false
}

// retype points a typed dict's memo entry at its model value.
func (d *decoder) retype(db *dictB) {
	if db.memo == 0 {
		return
	}
	if v, ok := direct(db); ok && d.m != nil {
		d.m.SetMemo(db.memo-1, v)
	}
}

func frameOf(v val) (*Frame, bool) {
	if v.k == kTyped && v.i == tagFrame {
		return (*Frame)(v.p), true
	}
	return typed[*Frame](v)
}
