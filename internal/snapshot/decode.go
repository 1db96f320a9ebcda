package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unsafe"
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
	memo   uint64 // 1 + its memo index; 0 when not memoised
}

// listB is a list as it is built. A list of frames holds them as a Stack
// from the start, so a stack costs a pointer per frame, as in the file.
type listB struct {
	items   []val
	st      Stack
	frames  bool // items went to st.Frames
	counted bool // counted in Snapshot.Stacks
	n       int  // items appended, of either kind
}

type decoder struct {
	src      io.Reader
	buf      []byte // read-ahead: buf[pos:end]
	pos      int
	end      int
	eof      bool
	off      int64 // bytes consumed
	lim      Limits
	stack    []val
	marks    []int
	memo     [][]val // pages of memoPage values
	memoN    uint64
	proto    int
	strs     map[string]string // short strings, interned
	contexts map[TraceContext]*TraceContext
	tab      *frameTable
	// lastContext is the trace context met last: entries in a row share it
	lastContext *TraceContext
	snap        *Snapshot
	frames      int
	stacks      int
	counter     func(int64)
	// blockAddrs: a block carried its address (torch >= 2.1)
	blockAddrs bool
}

const memoPage = 1 << 12

// Decode reads a snapshot from r: a pickle (protocol 2 to 5, as
// torch.cuda.memory._dump_snapshot or the C++ writer wrote it) or the same
// schema as JSON. progress, when not nil, is called with the bytes read so
// far every few MiB.
func Decode(r io.Reader, lim Limits, progress func(int64)) (*Snapshot, error) {
	d := &decoder{src: r, buf: make([]byte, 256<<10), lim: lim, strs: map[string]string{}, contexts: map[TraceContext]*TraceContext{}, tab: &frameTable{}, snap: &Snapshot{},
		counter: progress}
	var root val
	var err error
	if err := d.fill(1); err != nil {
		return nil, fmt.Errorf("%w: the file is empty", ErrNotSnapshot)
	}
	head := d.buf[d.pos:]
	switch {
	case head[0] == 0x80:
		root, err = d.run()
	case isJSONStart(head[0]):
		root, err = d.runJSON()
	default:
		return nil, fmt.Errorf("%w: neither a pickle (protocol 2 to 5) nor JSON (first byte 0x%02x)", ErrNotSnapshot, head[0])
	}
	if err != nil {
		return nil, err
	}
	if err := d.build(root); err != nil {
		return nil, err
	}
	d.snap.Frames, d.snap.Stacks = d.frames, d.stacks
	return d.snap, nil
}

func (d *decoder) errf(format string, a ...any) error {
	return fmt.Errorf("%w: %s (at byte %d)", ErrNotSnapshot, fmt.Sprintf(format, a...), d.off)
}

// fill makes at least n bytes readable at buf[pos:], n <= len(buf).
func (d *decoder) fill(n int) error {
	if d.end-d.pos >= n {
		return nil
	}
	copy(d.buf, d.buf[d.pos:d.end])
	d.end -= d.pos
	d.pos = 0
	for d.end < n && !d.eof {
		m, err := d.src.Read(d.buf[d.end:])
		d.end += m
		if err == io.EOF {
			d.eof = true
		} else if err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
	if d.end < n {
		return d.errf("the file ends inside a value (truncated?)")
	}
	return nil
}

func (d *decoder) advance(n int) {
	d.pos += n
	before := d.off
	d.off += int64(n)
	if d.counter != nil && before>>22 != d.off>>22 {
		d.counter(d.off)
	}
}

// read returns the next n bytes, valid until the next read.
func (d *decoder) read(n int64) ([]byte, error) {
	if n > d.lim.MaxString {
		return nil, d.errf("a value of %d bytes is over the %d-byte limit", n, d.lim.MaxString)
	}
	if int(n) > len(d.buf) {
		// a value longer than the read-ahead: read it whole
		b := make([]byte, n)
		k := copy(b, d.buf[d.pos:d.end])
		d.advance(k)
		if _, err := io.ReadFull(d.src, b[k:]); err != nil {
			return nil, d.errf("the file ends inside a value (truncated?)")
		}
		before := d.off
		d.off += n - int64(k)
		if d.counter != nil && before>>22 != d.off>>22 {
			d.counter(d.off)
		}
		return b, nil
	}
	if err := d.fill(int(n)); err != nil {
		return nil, err
	}
	b := d.buf[d.pos : d.pos+int(n)]
	d.advance(int(n))
	return b, nil
}

func (d *decoder) u8() (uint64, error) {
	if d.pos < d.end {
		c := d.buf[d.pos]
		d.advance(1)
		return uint64(c), nil
	}
	b, err := d.read(1)
	if err != nil {
		return 0, err
	}
	return uint64(b[0]), nil
}

func (d *decoder) le(n int64) (uint64, error) {
	b, err := d.read(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

// line reads a text operand (GLOBAL's module and name).
func (d *decoder) line() string {
	var out []byte
	for len(out) < 256 {
		c, err := d.u8()
		if err != nil || c == '\n' {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func (d *decoder) push(v val) error {
	if len(d.stack) >= d.lim.MaxStack {
		return d.errf("more than %d values on the pickle stack", d.lim.MaxStack)
	}
	d.stack = append(d.stack, v)
	return nil
}

func (d *decoder) pop() (val, error) {
	n := len(d.stack)
	if n == 0 || (len(d.marks) > 0 && d.marks[len(d.marks)-1] == n) {
		return val{}, d.errf("pickle stack underflow")
	}
	v := d.stack[n-1]
	d.stack = d.stack[:n-1]
	return v, nil
}

func (d *decoder) popMark() ([]val, error) {
	if len(d.marks) == 0 {
		return nil, d.errf("no MARK")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m:]
	d.stack = d.stack[:m]
	return items, nil
}

func (d *decoder) top() (*val, error) {
	n := len(d.stack)
	if n == 0 || (len(d.marks) > 0 && d.marks[len(d.marks)-1] == n) {
		return nil, d.errf("pickle stack underflow")
	}
	return &d.stack[n-1], nil
}

func (d *decoder) memoPut(i uint64) error {
	n := len(d.stack)
	if n == 0 {
		return d.errf("memo of an empty stack")
	}
	if i >= uint64(d.lim.MaxMemo) {
		return d.errf("memo index %d over the limit %d", i, d.lim.MaxMemo)
	}
	for uint64(len(d.memo))*memoPage <= i {
		d.memo = append(d.memo, make([]val, memoPage))
	}
	v := d.stack[n-1]
	d.memo[i/memoPage][i%memoPage] = v
	if db := v.dict(); db != nil {
		db.memo = i + 1
	}
	if i >= d.memoN {
		d.memoN = i + 1
	}
	return nil
}

func (d *decoder) memoGet(i uint64) error {
	if i >= d.memoN {
		return d.errf("memo %d read before it was written", i)
	}
	return d.push(d.memo[i/memoPage][i%memoPage])
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

func (d *decoder) run() (val, error) {
	for {
		// The opcodes that make up most of a snapshot (memo reads and
		// writes of shared frames, keys and strings, small ints, marks) are
		// decoded here when their operands are in the read-ahead.
		if d.end-d.pos >= 6 {
			b := d.buf[d.pos:]
			switch b[0] {
			case 'h': // BINGET
				i := uint64(b[1])
				if i < d.memoN && len(d.stack) < d.lim.MaxStack {
					d.stack = append(d.stack, d.memo[i/memoPage][i%memoPage])
					d.advance(2)
					continue
				}
			case 'j': // LONG_BINGET
				i := uint64(binary.LittleEndian.Uint32(b[1:]))
				if i < d.memoN && len(d.stack) < d.lim.MaxStack {
					d.stack = append(d.stack, d.memo[i/memoPage][i%memoPage])
					d.advance(5)
					continue
				}
			case 0x94: // MEMOIZE
				d.advance(1)
				if err := d.memoPut(d.memoN); err != nil {
					return val{}, err
				}
				continue
			case 'K': // BININT1
				if len(d.stack) < d.lim.MaxStack {
					d.stack = append(d.stack, val{k: kInt, i: int64(b[1])})
					d.advance(2)
					continue
				}
			case '(': // MARK
				if len(d.marks) < d.lim.MaxDepth {
					d.marks = append(d.marks, len(d.stack))
					d.advance(1)
					continue
				}
			}
		}
		op, err := d.u8()
		if err != nil {
			return val{}, d.errf("the file ends before the pickle's STOP (truncated?)")
		}
		if op == '.' {
			v, err := d.pop()
			if err != nil {
				return val{}, err
			}
			return v, nil
		}
		if err := d.step(byte(op)); err != nil {
			return val{}, err
		}
	}
}

func (d *decoder) str(width int64, k kind) error {
	n, err := d.le(width)
	if err != nil {
		return err
	}
	if n > uint64(d.lim.MaxString) {
		return d.errf("a value of %d bytes is over the %d-byte limit", n, d.lim.MaxString)
	}
	b, err := d.read(int64(n))
	if err != nil {
		return err
	}
	return d.push(strVal(d.string(b), k))
}

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
	d.strs[s] = s
	return s
}

func (d *decoder) step(op byte) error {
	switch op {
	case 0x80: // PROTO
		p, err := d.u8()
		if err != nil {
			return err
		}
		if p < 2 || p > 5 {
			return d.errf("pickle protocol %d (snapshots are protocol 2 to 5)", p)
		}
		d.proto = int(p)
	case 0x95: // FRAME
		_, err := d.le(8)
		return err
	case '(': // MARK
		if len(d.marks) >= d.lim.MaxDepth {
			return d.errf("more than %d nested MARKs", d.lim.MaxDepth)
		}
		d.marks = append(d.marks, len(d.stack))
	case '0': // POP
		if n := len(d.stack); n > 0 && (len(d.marks) == 0 || d.marks[len(d.marks)-1] < n) {
			d.stack = d.stack[:n-1]
		} else if _, err := d.popMark(); err != nil {
			return err
		}
	case '1': // POP_MARK
		_, err := d.popMark()
		return err
	case '2': // DUP
		t, err := d.top()
		if err != nil {
			return err
		}
		return d.push(*t)
	case 'N':
		return d.push(val{k: kNone})
	case 0x88, 0x89: // NEWTRUE, NEWFALSE
		var i int64
		if op == 0x88 {
			i = 1
		}
		return d.push(val{k: kBool, i: i})
	case 'K':
		v, err := d.le(1)
		if err != nil {
			return err
		}
		return d.push(val{k: kInt, i: int64(v)})
	case 'M':
		v, err := d.le(2)
		if err != nil {
			return err
		}
		return d.push(val{k: kInt, i: int64(v)})
	case 'J':
		v, err := d.le(4)
		if err != nil {
			return err
		}
		return d.push(val{k: kInt, i: int64(int32(uint32(v)))})
	case 0x8a, 0x8b: // LONG1, LONG4
		w := int64(1)
		if op == 0x8b {
			w = 4
		}
		n, err := d.le(w)
		if err != nil {
			return err
		}
		if n > uint64(d.lim.MaxString) {
			return d.errf("an integer of %d bytes is over the limit", n)
		}
		b, err := d.read(int64(n))
		if err != nil {
			return err
		}
		v := long(b)
		if v.k == kBig {
			d.snap.Saturated++
		}
		return d.push(v)
	case 'G': // BINFLOAT
		b, err := d.read(8)
		if err != nil {
			return err
		}
		return d.push(val{k: kFloat, i: int64(binary.BigEndian.Uint64(b))})
	case 0x8c: // SHORT_BINUNICODE
		return d.str(1, kStr)
	case 'X': // BINUNICODE
		return d.str(4, kStr)
	case 0x8d: // BINUNICODE8
		return d.str(8, kStr)
	case 'U': // SHORT_BINSTRING
		return d.str(1, kStr)
	case 'T': // BINSTRING
		return d.str(4, kStr)
	case 'C': // SHORT_BINBYTES
		return d.str(1, kBytes)
	case 'B': // BINBYTES
		return d.str(4, kBytes)
	case 0x8e: // BINBYTES8
		return d.str(8, kBytes)
	case 0x96: // BYTEARRAY8
		return d.str(8, kBytes)
	case ')':
		return d.push(tupleVal(nil))
	case 0x85, 0x86, 0x87: // TUPLE1..3
		n := int(op-0x85) + 1
		if len(d.stack) < n || (len(d.marks) > 0 && len(d.stack)-n < d.marks[len(d.marks)-1]) {
			return d.errf("pickle stack underflow")
		}
		t := make([]val, n)
		copy(t, d.stack[len(d.stack)-n:])
		d.stack = d.stack[:len(d.stack)-n]
		return d.push(tupleVal(t))
	case 't': // TUPLE
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.push(tupleVal(append([]val(nil), items...)))
	case ']', 0x8f: // EMPTY_LIST, EMPTY_SET
		return d.push(listVal(&listB{}))
	case 'l', 0x91: // LIST, FROZENSET
		items, err := d.popMark()
		if err != nil {
			return err
		}
		l := &listB{}
		d.appendItems(l, items)
		return d.push(listVal(l))
	case 'a': // APPEND
		v, err := d.pop()
		if err != nil {
			return err
		}
		return d.appendTo([]val{v})
	case 'e', 0x90: // APPENDS, ADDITEMS
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.appendTo(items)
	case '}':
		return d.push(dictVal(&dictB{}))
	case 'd': // DICT
		items, err := d.popMark()
		if err != nil {
			return err
		}
		db := &dictB{}
		if err := d.setItems(db, items); err != nil {
			return err
		}
		return d.push(dictVal(db))
	case 's': // SETITEM
		n := len(d.stack)
		if n < 3 || (len(d.marks) > 0 && n-3 < d.marks[len(d.marks)-1]) {
			return d.errf("pickle stack underflow")
		}
		db := d.stack[n-3].dict()
		if db == nil {
			return d.errf("SETITEM on a %s", d.stack[n-3].kindName())
		}
		if err := d.setItems(db, d.stack[n-2:]); err != nil {
			return err
		}
		d.stack = d.stack[:n-2]
	case 'u': // SETITEMS
		items, err := d.popMark()
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		db := t.dict()
		if db == nil {
			return d.errf("SETITEMS on a %s", t.kindName())
		}
		return d.setItems(db, items)
	case 'q': // BINPUT
		i, err := d.le(1)
		if err != nil {
			return err
		}
		return d.memoPut(i)
	case 'r': // LONG_BINPUT
		i, err := d.le(4)
		if err != nil {
			return err
		}
		return d.memoPut(i)
	case 0x94: // MEMOIZE
		return d.memoPut(d.memoN)
	case 'h': // BINGET
		i, err := d.le(1)
		if err != nil {
			return err
		}
		return d.memoGet(i)
	case 'j': // LONG_BINGET
		i, err := d.le(4)
		if err != nil {
			return err
		}
		return d.memoGet(i)
	case 'c': // GLOBAL
		mod := d.line()
		name := d.line()
		return d.errf("it holds global %s.%s, and a memory snapshot holds plain data only", mod, name)
	case 0x93: // STACK_GLOBAL
		if len(d.stack) >= 2 {
			m, n := d.stack[len(d.stack)-2], d.stack[len(d.stack)-1]
			if m.k == kStr && n.k == kStr {
				return d.errf("it holds global %s.%s, and a memory snapshot holds plain data only", m.str(), n.str())
			}
		}
		return d.errf("it holds a global (STACK_GLOBAL), and a memory snapshot holds plain data only")
	case 'R', 'b', 0x81, 0x92, 'i', 'o':
		return d.errf("it holds a call (%s), and a memory snapshot holds plain data only", opNames[op])
	case 'P', 'Q':
		return d.errf("it holds a persistent id, and a memory snapshot holds plain data only")
	case 0x82, 0x83, 0x84:
		return d.errf("it holds an extension code (EXT), and a memory snapshot holds plain data only")
	case 0x97, 0x98:
		return d.errf("it holds an out-of-band buffer, and a memory snapshot holds plain data only")
	default:
		return d.errf("opcode 0x%02x is not one of pickle protocols 2 to 5's plain-data opcodes", op)
	}
	return nil
}

var opNames = map[byte]string{'R': "REDUCE", 'b': "BUILD", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 'i': "INST", 'o': "OBJ"}

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

func (d *decoder) appendTo(items []val) error {
	t, err := d.top()
	if err != nil {
		return err
	}
	l := t.list()
	if l == nil {
		return d.errf("APPENDS on a %s", t.kindName())
	}
	d.appendItems(l, items)
	return nil
}

// appendItems adds items to l: while every item is a frame, as frames.
func (d *decoder) appendItems(l *listB, items []val) {
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
			return
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
			return
		}
		if l.frames { // frames, then something else: back to plain items
			for _, id := range l.st.ids {
				l.items = append(l.items, val{p: unsafe.Pointer(d.tab.frames[id]), i: tagFrame, k: kTyped})
			}
			l.st.ids, l.frames = nil, false
		}
	}
	if l.items == nil {
		l.items = make([]val, 0, len(items))
	}
	l.items = append(l.items, items...)
	l.n += len(items)
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
	if v, ok := direct(db); ok {
		i := db.memo - 1
		d.memo[i/memoPage][i%memoPage] = v
	}
}

func frameOf(v val) (*Frame, bool) {
	if v.k == kTyped && v.i == tagFrame {
		return (*Frame)(v.p), true
	}
	return typed[*Frame](v)
}
