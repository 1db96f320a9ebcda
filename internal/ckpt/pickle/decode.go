package pickle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits bounds one decode.
type Limits struct {
	MaxBytes  int64 // bytes of pickle consumed
	MaxOps    int   // opcodes executed
	MaxMemo   int   // memo entries
	MaxStack  int   // values on the stack and in all marks together
	MaxMarks  int   // nested MARKs
	MaxDepth  int   // nesting of containers and calls as they are built
	MaxString int64 // one string/bytes value
}

// DefaultLimits fit the pickle of any real checkpoint (a state_dict with a
// hundred thousand tensors is a few tens of MiB of pickle).
var DefaultLimits = Limits{
	MaxBytes:  256 << 20,
	MaxOps:    50_000_000,
	MaxMemo:   5_000_000,
	MaxStack:  5_000_000,
	MaxMarks:  10_000,
	MaxDepth:  1_000,
	MaxString: 64 << 20,
}

// GlobalRef is one global reference met while decoding.
type GlobalRef struct {
	Global
	Offset   int64  // of the opcode
	Opcode   string // GLOBAL, STACK_GLOBAL, INST
	Resolved bool   // false when STACK_GLOBAL operands were not plain strings
	Detail   string // why it could not be resolved
	Proto    int    // the protocol in force (the last PROTO opcode; 0 before any)
}

// Result is one decoded pickle.
type Result struct {
	Value    any
	Protocol int
	Globals  []GlobalRef
	Ops      int
	End      int64 // offset just past STOP
	Exts     []int32
	PersIDs  int
	// Builds are the BUILD opcodes met, each with what it acts on: what
	// the scan checks, since BUILD calls the target's __setstate__ or sets
	// its attributes.
	Builds []Build
	// Calls are the calls met (REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ),
	// in order, each with its node: also those whose result the pickle
	// drops (POP), which the value tree does not hold.
	Calls []CallRef
	// PersIDList are the persistent ids met, each with its value: the
	// loader's persistent_load decides what they do.
	PersIDList []PersIDRef
	// FrameEnd is, when STOP came inside a FRAME, where that frame ends
	// (FrameLen its length): CPython's unpickler has read the whole frame,
	// and a reader that cannot give back what it read ahead starts the
	// next pickle there. 0 otherwise.
	FrameEnd, FrameLen int64
	Buffers            int
	ErrAt              int64 // offset of the opcode that failed; -1 when none did
}

// ErrLimit is wrapped by errors that come from a bound in Limits.
var ErrLimit = errors.New("pickle limit exceeded")

// ErrOpaque is wrapped by a stop CPython need not make: APPENDS, SETITEMS
// or ADDITEMS on an object the decoder only knows symbolically (what a
// call returned, a class, a persistent id's object), where CPython calls
// the object's own append, __setitem__ or add and may go on.
var ErrOpaque = errors.New("CPython may go on here")

// opaqueErr is the error for an item opcode on t: wrapping ErrOpaque when
// t is an object whose methods the decoder cannot know.
func opaqueErr(t any, format string, a ...any) error {
	switch t.(type) {
	case *Call, Global, PersID, Ext, Buffer:
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrOpaque)
	}
	return fmt.Errorf(format, a...)
}

// Decode reads one pickle from r starting at off; size is the length of r.
// On error the Result still carries the globals met so far.
func Decode(r io.ReaderAt, off, size int64, lim Limits) (*Result, error) {
	if lim.MaxOps <= 0 {
		lim = DefaultLimits
	}
	maxLine := lim.MaxString
	if maxLine < 1<<20 {
		maxLine = 1 << 20
	}
	d := &decoder{src: src{r: r, pos: off, start: off, size: size, max: lim.MaxBytes, maxLine: maxLine}, lim: lim, memo: map[uint64]memoEnt{}}
	d.res.Protocol = 0
	err := d.run()
	d.res.End = d.src.pos
	d.res.ErrAt = -1
	if err != nil {
		d.res.ErrAt = d.opPos
		return &d.res, fmt.Errorf("pickle at byte %d: %w", d.opPos, err)
	}
	return &d.res, nil
}

// DecodeBytes decodes one pickle held in memory.
func DecodeBytes(b []byte, lim Limits) (*Result, error) {
	return Decode(byteReaderAt(b), 0, int64(len(b)), lim)
}

type byteReaderAt []byte

func (b byteReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// src is a small forward reader over an io.ReaderAt with a window buffer.
type src struct {
	r          io.ReaderAt
	pos, start int64
	size, max  int64
	buf        []byte
	bufOff     int64
	maxLine    int64 // longest text operand line
}

var errTruncated = errors.New("pickle truncated")

func (s *src) fill(n int64) error {
	if s.pos+n > s.size {
		return errTruncated
	}
	if s.pos-s.start+n > s.max {
		return fmt.Errorf("%w: pickle longer than %d bytes", ErrLimit, s.max)
	}
	if s.pos >= s.bufOff && s.pos+n <= s.bufOff+int64(len(s.buf)) {
		return nil
	}
	want := n
	if want < 64<<10 {
		want = 64 << 10
	}
	if s.pos+want > s.size {
		want = s.size - s.pos
	}
	if int64(cap(s.buf)) >= want {
		s.buf = s.buf[:want]
	} else {
		s.buf = make([]byte, want)
	}
	k, err := s.r.ReadAt(s.buf, s.pos)
	if int64(k) < n {
		if err == nil || errors.Is(err, io.EOF) {
			return errTruncated
		}
		return err
	}
	s.buf = s.buf[:k]
	s.bufOff = s.pos
	return nil
}

func (s *src) bytes(n int64) ([]byte, error) {
	if n < 0 {
		return nil, errors.New("negative length")
	}
	if err := s.fill(n); err != nil {
		return nil, err
	}
	i := s.pos - s.bufOff
	b := s.buf[i : i+n]
	s.pos += n
	return b, nil
}

func (s *src) byte() (byte, error) {
	b, err := s.bytes(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// line reads up to and excluding '\n' (at most maxLine bytes).
func (s *src) line() (string, error) {
	var sb strings.Builder
	for {
		c, err := s.byte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return sb.String(), nil
		}
		if int64(sb.Len()) >= s.maxLine {
			return "", fmt.Errorf("%w: text line over %d bytes", ErrLimit, s.maxLine)
		}
		sb.WriteByte(c)
	}
}

type decoder struct {
	src    src
	lim    Limits
	stack  []any
	depths []int // nesting depth of each stack value
	marks  []int
	memo   map[uint64]memoEnt
	// popped is the depth of the last value pop returned, and the largest
	// depth among the items popMark returned.
	popped int
	res    Result
	opPos  int64
	nbuf   int
	// frameEnd and frameLen: the last FRAME read, where it ends.
	frameEnd, frameLen int64
}

type memoEnt struct {
	v     any
	depth int
}

func (d *decoder) push(v any) error { return d.pushD(v, 0) }

// pushD pushes a value nested depth levels deep.
func (d *decoder) pushD(v any, depth int) error {
	if len(d.stack) >= d.lim.MaxStack {
		return fmt.Errorf("%w: stack over %d values", ErrLimit, d.lim.MaxStack)
	}
	if depth > d.lim.MaxDepth {
		return fmt.Errorf("%w: nesting deeper than %d", ErrLimit, d.lim.MaxDepth)
	}
	d.stack = append(d.stack, v)
	d.depths = append(d.depths, depth)
	return nil
}

// pop2 pops the top value and the one below it, and returns the deeper of
// the two values' depths (what a container built from both nests at).
func (d *decoder) pop2() (top, below any, depth int, err error) {
	if top, err = d.pop(); err != nil {
		return nil, nil, 0, err
	}
	depth = d.popped
	if below, err = d.pop(); err != nil {
		return nil, nil, 0, err
	}
	return top, below, max(depth, d.popped), nil
}

// popCall pops the argument tuple and then the callable of a REDUCE or a
// NEWOBJ (op names it in errors); the call nests as deep as its arguments.
func (d *decoder) popCall(op string) (fn any, args Tuple, err error) {
	a, err := d.pop()
	if err != nil {
		return nil, nil, err
	}
	depth := d.popped
	if fn, err = d.pop(); err != nil {
		return nil, nil, err
	}
	t, ok := a.(Tuple)
	if !ok {
		return nil, nil, fmt.Errorf("%s arguments are %T, not a tuple", op, a)
	}
	d.popped = depth
	return fn, t, nil
}

// nest pushes a container built from the last popped values.
func (d *decoder) nest(v any) error { return d.pushD(v, d.popped+1) }

// deepen records that the value on top now holds something of depth.
func (d *decoder) deepen(depth int) error {
	i := len(d.depths) - 1
	if depth+1 > d.depths[i] {
		if depth+1 > d.lim.MaxDepth {
			return fmt.Errorf("%w: nesting deeper than %d", ErrLimit, d.lim.MaxDepth)
		}
		d.depths[i] = depth + 1
	}
	return nil
}

func (d *decoder) pop() (any, error) {
	base := 0
	if len(d.marks) > 0 {
		base = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= base {
		return nil, errors.New("stack underflow")
	}
	v := d.stack[len(d.stack)-1]
	d.popped = d.depths[len(d.depths)-1]
	d.stack = d.stack[:len(d.stack)-1]
	d.depths = d.depths[:len(d.depths)-1]
	return v, nil
}

func (d *decoder) top() (any, error) {
	base := 0
	if len(d.marks) > 0 {
		base = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= base {
		return nil, errors.New("stack underflow")
	}
	return d.stack[len(d.stack)-1], nil
}

// popMark returns the items above the last MARK and removes them and it.
func (d *decoder) popMark() ([]any, error) {
	if len(d.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := make([]any, len(d.stack)-m)
	copy(items, d.stack[m:])
	d.popped = 0
	for _, x := range d.depths[m:] {
		if x > d.popped {
			d.popped = x
		}
	}
	d.stack = d.stack[:m]
	d.depths = d.depths[:m]
	return items, nil
}

// memoPut stores the value on top of the stack.
func (d *decoder) memoPut(k uint64) error {
	if len(d.stack) == 0 || (len(d.marks) > 0 && len(d.stack) == d.marks[len(d.marks)-1]) {
		return errors.New("stack underflow")
	}
	if _, ok := d.memo[k]; !ok && len(d.memo) >= d.lim.MaxMemo {
		return fmt.Errorf("%w: memo over %d entries", ErrLimit, d.lim.MaxMemo)
	}
	d.memo[k] = memoEnt{d.stack[len(d.stack)-1], d.depths[len(d.depths)-1]}
	return nil
}

func (d *decoder) memoGet(k uint64) error {
	e, ok := d.memo[k]
	if !ok {
		return fmt.Errorf("memo key %d not defined", k)
	}
	return d.pushD(e.v, e.depth)
}

// CallRef is one call opcode and the Call node it built (a later BUILD
// sets the node's State).
type CallRef struct {
	Offset int64
	Opcode string
	Call   *Call
}

func (d *decoder) call(c *Call, op string) *Call {
	d.res.Calls = append(d.res.Calls, CallRef{Offset: d.opPos, Opcode: op, Call: c})
	return c
}

func (d *decoder) global(g Global, op string, resolved bool, detail string) {
	d.res.Globals = append(d.res.Globals, GlobalRef{Global: g, Offset: d.opPos, Opcode: op, Resolved: resolved, Detail: detail, Proto: d.res.Protocol})
}

// memoKey reads the memo index of a PUT or GET opcode: a decimal line (p,
// g), one byte (q, h) or four little-endian bytes (r, j).
func (d *decoder) memoKey(op byte) (uint64, error) {
	switch op {
	case 'p', 'g':
		l, err := d.src.line()
		if err != nil {
			return 0, err
		}
		return parseMemoKey(l)
	case 'q', 'h':
		b, err := d.src.byte()
		return uint64(b), err
	}
	k, err := d.u32()
	return uint64(k), err
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.src.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.src.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// uint reads an unsigned little-endian integer of width 1, 2, 4 or 8 bytes:
// the length or code operand of an opcode.
func (d *decoder) uint(width int) (uint64, error) {
	b, err := d.src.bytes(int64(width))
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := width - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

// operandWidth is the byte width of the length or code operand of the
// string, bytes and extension opcodes.
func operandWidth(op byte) int {
	switch op {
	case 'U', 'C', 0x8c, 0x82: // SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE, EXT1
		return 1
	case 0x83: // EXT2
		return 2
	case 'T', 'B', 'X', 0x84: // BINSTRING, BINBYTES, BINUNICODE, EXT4
		return 4
	}
	return 8 // BINBYTES8, BYTEARRAY8, BINUNICODE8
}

func (d *decoder) str(n uint64) ([]byte, error) {
	if n > uint64(d.lim.MaxString) {
		return nil, fmt.Errorf("%w: string of %d bytes", ErrLimit, n)
	}
	b, err := d.src.bytes(int64(n))
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(b))
	copy(out, b)
	return out, nil
}

func (d *decoder) run() error {
	for {
		if d.res.Ops >= d.lim.MaxOps {
			return fmt.Errorf("%w: over %d opcodes", ErrLimit, d.lim.MaxOps)
		}
		d.res.Ops++
		d.opPos = d.src.pos
		op, err := d.src.byte()
		if err != nil {
			return err
		}
		if err := d.step(op); err != nil {
			if err == errStop {
				return nil
			}
			return fmt.Errorf("opcode %s: %w", opName(op), err)
		}
	}
}

var errStop = errors.New("stop")

func opName(op byte) string {
	if op >= 0x20 && op < 0x7f {
		return fmt.Sprintf("%q", rune(op))
	}
	return fmt.Sprintf("0x%02x", op)
}

func (d *decoder) step(op byte) error {
	switch op {
	case 0x80: // PROTO
		b, err := d.src.byte()
		if err != nil {
			return err
		}
		if b > 5 {
			return fmt.Errorf("unsupported protocol %d", b)
		}
		d.res.Protocol = int(b)
		return nil
	case 0x95: // FRAME
		n, err := d.u64()
		if err != nil {
			return err
		}
		if int64(n) < 0 || d.src.pos+int64(n) > d.src.size {
			return fmt.Errorf("frame of %d bytes runs past the input: %w", n, errTruncated)
		}
		d.frameEnd, d.frameLen = d.src.pos+int64(n), int64(n)
		return nil
	case '.': // STOP
		if len(d.stack) == 0 {
			return errors.New("STOP on an empty stack")
		}
		d.res.Value = d.stack[len(d.stack)-1]
		if d.src.pos < d.frameEnd {
			d.res.FrameEnd, d.res.FrameLen = d.frameEnd, d.frameLen
		}
		return errStop
	case '(': // MARK
		if len(d.marks) >= d.lim.MaxMarks {
			return fmt.Errorf("%w: over %d nested marks", ErrLimit, d.lim.MaxMarks)
		}
		d.marks = append(d.marks, len(d.stack))
		return nil
	case '0': // POP
		if len(d.marks) > 0 && len(d.stack) == d.marks[len(d.marks)-1] {
			// POP of a MARK (pickletools allows it).
			d.marks = d.marks[:len(d.marks)-1]
			return nil
		}
		_, err := d.pop()
		return err
	case '1': // POP_MARK
		_, err := d.popMark()
		return err
	case '2': // DUP
		v, err := d.top()
		if err != nil {
			return err
		}
		return d.pushD(v, d.depths[len(d.depths)-1])
	case 'N':
		return d.push(None{})
	case 0x88:
		return d.push(true)
	case 0x89:
		return d.push(false)
	case 'I': // INT
		l, err := d.src.line()
		if err != nil {
			return err
		}
		v, err := parseIntOperand(l)
		if err != nil {
			return err
		}
		return d.push(v)
	case 'L': // LONG
		l, err := d.src.line()
		if err != nil {
			return err
		}
		v, err := parseLongOperand(l)
		if err != nil {
			return err
		}
		return d.push(v)
	case 'J':
		v, err := d.u32()
		if err != nil {
			return err
		}
		return d.push(int64(int32(v)))
	case 'K':
		b, err := d.src.byte()
		if err != nil {
			return err
		}
		return d.push(int64(b))
	case 'M':
		b, err := d.src.bytes(2)
		if err != nil {
			return err
		}
		return d.push(int64(binary.LittleEndian.Uint16(b)))
	case 0x8a, 0x8b: // LONG1, LONG4
		var n uint64
		if op == 0x8a {
			b, err := d.src.byte()
			if err != nil {
				return err
			}
			n = uint64(b)
		} else {
			v, err := d.u32()
			if err != nil {
				return err
			}
			if int32(v) < 0 {
				return errors.New("negative LONG4 length")
			}
			n = uint64(v)
		}
		if n > uint64(d.lim.MaxString) {
			return fmt.Errorf("%w: integer of %d bytes", ErrLimit, n)
		}
		b, err := d.src.bytes(int64(n))
		if err != nil {
			return err
		}
		if n > 1<<16 {
			// Python reads it; nothing here needs its value.
			return d.push(LargeInt{Digits: int(n) * 2})
		}
		return d.push(decodeLong(b))
	case 'F':
		l, err := d.src.line()
		if err != nil {
			return err
		}
		f, err := parseFloatOperand(l)
		if err != nil {
			return err
		}
		return d.push(f)
	case 'G':
		b, err := d.src.bytes(8)
		if err != nil {
			return err
		}
		return d.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case 'S': // STRING (repr, quoted)
		l, err := d.src.line()
		if err != nil {
			return err
		}
		s, err := unquoteString(l)
		if err != nil {
			return err
		}
		return d.push(s)
	case 'T', 'U', 'B', 'C', 0x8e, 0x96: // BINSTRING, SHORT_BINSTRING, BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
		n, err := d.uint(operandWidth(op))
		if err != nil {
			return err
		}
		if op == 'T' && int32(n) < 0 {
			return errors.New("negative BINSTRING length")
		}
		b, err := d.str(n)
		if err != nil {
			return err
		}
		if op == 'T' || op == 'U' {
			// Python 2 str: decoded as latin-1 by torch's loader; keep text.
			return d.push(latin1(b))
		}
		return d.push(Bytes(b))
	case 'V': // UNICODE (raw-unicode-escape)
		l, err := d.src.line()
		if err != nil {
			return err
		}
		s, err := rawUnicodeUnescape(l)
		if err != nil {
			return err
		}
		return d.push(s)
	case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
		n, err := d.uint(operandWidth(op))
		if err != nil {
			return err
		}
		b, err := d.str(n)
		if err != nil {
			return err
		}
		if err := utf8SurrogatePass(b); err != nil {
			return err
		}
		return d.push(string(b))
	case 0x97: // NEXT_BUFFER
		d.nbuf++
		d.res.Buffers++
		return d.push(Buffer{Index: d.nbuf - 1})
	case 0x98: // READONLY_BUFFER
		_, err := d.top()
		return err
	case ')':
		return d.push(Tuple{})
	case 't':
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.nest(Tuple(items))
	case 0x85, 0x86, 0x87:
		n := int(op-0x85) + 1
		t := make(Tuple, n)
		maxd := 0
		for i := n - 1; i >= 0; i-- {
			v, err := d.pop()
			if err != nil {
				return err
			}
			t[i] = v
			if d.popped > maxd {
				maxd = d.popped
			}
		}
		d.popped = maxd
		return d.nest(t)
	case ']':
		return d.push(&List{})
	case 'l':
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.nest(&List{Items: items})
	case '}':
		return d.push(&Dict{})
	case 'd':
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if len(items)%2 != 0 {
			return errors.New("DICT with an odd number of items")
		}
		dict := &Dict{}
		for i := 0; i < len(items); i += 2 {
			dict.set(items[i], items[i+1])
		}
		return d.nest(dict)
	case 0x8f:
		return d.push(&Set{})
	case 0x91:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.nest(&Set{Items: items, Frozen: true})
	case 'a': // APPEND
		v, err := d.pop()
		if err != nil {
			return err
		}
		if err := d.appendTo([]any{v}); err != nil {
			return err
		}
		return d.deepen(d.popped)
	case 'e': // APPENDS
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if err := d.appendTo(items); err != nil {
			return err
		}
		return d.deepen(d.popped)
	case 0x90: // ADDITEMS
		items, err := d.popMark()
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		s, ok := t.(*Set)
		if !ok {
			return opaqueErr(t, "ADDITEMS on %T", t)
		}
		s.Items = append(s.Items, items...)
		return d.deepen(d.popped)
	case 's': // SETITEM
		v, k, vd, err := d.pop2()
		if err != nil {
			return err
		}
		if err := d.setItems([]any{k, v}); err != nil {
			return err
		}
		return d.deepen(vd)
	case 'u': // SETITEMS
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if len(items)%2 != 0 {
			return errors.New("SETITEMS with an odd number of items")
		}
		if err := d.setItems(items); err != nil {
			return err
		}
		return d.deepen(d.popped)
	case 'p', 'q', 'r': // PUT, BINPUT, LONG_BINPUT
		k, err := d.memoKey(op)
		if err != nil {
			return err
		}
		return d.memoPut(k)
	case 0x94: // MEMOIZE
		return d.memoPut(uint64(len(d.memo)))
	case 'g', 'h', 'j': // GET, BINGET, LONG_BINGET
		k, err := d.memoKey(op)
		if err != nil {
			return err
		}
		return d.memoGet(k)
	case 'c': // GLOBAL
		mod, err := d.src.line()
		if err != nil {
			return err
		}
		name, err := d.src.line()
		if err != nil {
			return err
		}
		if mod == "" || name == "" || !utf8.ValidString(mod) || !utf8.ValidString(name) {
			return fmt.Errorf("GLOBAL operands %q %q are not non-empty UTF-8", truncate(mod), truncate(name))
		}
		g := Global{Module: mod, Name: name}
		d.global(g, "GLOBAL", true, "")
		return d.push(g)
	case 0x93: // STACK_GLOBAL
		nv, err := d.pop()
		if err != nil {
			return err
		}
		mv, err := d.pop()
		if err != nil {
			return err
		}
		ms, ok1 := mv.(string)
		ns, ok2 := nv.(string)
		if !ok1 || !ok2 {
			g := Global{Module: describe(mv), Name: describe(nv)}
			d.global(g, "STACK_GLOBAL", false, fmt.Sprintf("operands are %T and %T, not strings", mv, nv))
			return d.push(g)
		}
		g := Global{Module: ms, Name: ns}
		d.global(g, "STACK_GLOBAL", true, "")
		return d.push(g)
	case 0x82, 0x83, 0x84: // EXT1, EXT2, EXT4
		v, err := d.uint(operandWidth(op))
		if err != nil {
			return err
		}
		code := int32(v)
		d.res.Exts = append(d.res.Exts, code)
		d.global(Global{Module: "<extension registry>", Name: fmt.Sprint(code)}, opName(op), false, "extension registry codes cannot be resolved without Python's copyreg")
		return d.push(Ext{Code: code})
	case 'P': // PERSID
		l, err := d.src.line()
		if err != nil {
			return err
		}
		d.res.PersIDs++
		d.res.PersIDList = append(d.res.PersIDList, PersIDRef{Offset: d.opPos, ID: l})
		return d.push(PersID{ID: l})
	case 'Q': // BINPERSID
		v, err := d.pop()
		if err != nil {
			return err
		}
		d.res.PersIDs++
		d.res.PersIDList = append(d.res.PersIDList, PersIDRef{Offset: d.opPos, ID: v})
		return d.nest(PersID{ID: v})
	case 'R': // REDUCE
		fn, t, err := d.popCall("REDUCE")
		if err != nil {
			return err
		}
		return d.nest(d.call(&Call{Func: fn, Args: t}, "REDUCE"))
	case 0x81: // NEWOBJ
		cls, t, err := d.popCall("NEWOBJ")
		if err != nil {
			return err
		}
		return d.nest(d.call(&Call{Func: cls, Args: t, New: true}, "NEWOBJ"))
	case 0x92: // NEWOBJ_EX
		kw, args, ad, err := d.pop2()
		if err != nil {
			return err
		}
		cls, err := d.pop()
		if err != nil {
			return err
		}
		t, ok := args.(Tuple)
		if !ok {
			return fmt.Errorf("NEWOBJ_EX arguments are %T, not a tuple", args)
		}
		kd, ok := kw.(*Dict)
		if !ok {
			return fmt.Errorf("NEWOBJ_EX keywords are %T, not a dict", kw)
		}
		d.popped = ad
		return d.nest(d.call(&Call{Func: cls, Args: t, Kwargs: kd, New: true}, "NEWOBJ_EX"))
	case 'i': // INST
		mod, err := d.src.line()
		if err != nil {
			return err
		}
		name, err := d.src.line()
		if err != nil {
			return err
		}
		if mod == "" || name == "" {
			return errors.New("INST operand is empty")
		}
		if err := asciiLine(mod); err != nil {
			return err
		}
		if err := asciiLine(name); err != nil {
			return err
		}
		items, err := d.popMark()
		if err != nil {
			return err
		}
		g := Global{Module: mod, Name: name}
		d.global(g, "INST", true, "")
		return d.nest(d.call(&Call{Func: g, Args: Tuple(items)}, "INST"))
	case 'o': // OBJ
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return errors.New("OBJ without a class")
		}
		return d.nest(d.call(&Call{Func: items[0], Args: Tuple(items[1:])}, "OBJ"))
	case 'b': // BUILD
		state, err := d.pop()
		if err != nil {
			return err
		}
		sd := d.popped
		t, err := d.top()
		if err != nil {
			return err
		}
		d.res.Builds = append(d.res.Builds, Build{Offset: d.opPos, Target: t})
		if _, isStr := t.(string); isStr {
			// A str has no __setstate__ and no __dict__: Python leaves it
			// as it is (state None) or fails. It stays a str, so a
			// STACK_GLOBAL operand built this way is still read.
			return nil
		}
		c, ok := t.(*Call)
		if !ok {
			// BUILD on a Global or container still means a __setstate__
			// call; wrap it so the state is kept.
			d.stack[len(d.stack)-1] = &Call{Func: Global{Module: "<build>", Name: describe(t)}, Args: Tuple{t}, State: state, HasState: true}
			return d.deepen(sd)
		}
		c.State, c.HasState = state, true
		return d.deepen(sd)
	default:
		return fmt.Errorf("unknown opcode")
	}
}

func (d *decoder) appendTo(items []any) error {
	t, err := d.top()
	if err != nil {
		return err
	}
	switch c := t.(type) {
	case *List:
		c.Items = append(c.Items, items...)
	case *Call:
		c.ListItems = append(c.ListItems, items...)
	default:
		return opaqueErr(t, "APPEND to %T", t)
	}
	return nil
}

func (d *decoder) setItems(items []any) error {
	t, err := d.top()
	if err != nil {
		return err
	}
	switch c := t.(type) {
	case *Dict:
		for i := 0; i < len(items); i += 2 {
			c.set(items[i], items[i+1])
		}
	case *Call:
		if c.DictItems == nil {
			c.DictItems = &Dict{}
		}
		for i := 0; i < len(items); i += 2 {
			c.DictItems.set(items[i], items[i+1])
		}
	default:
		return opaqueErr(t, "SETITEM on %T", t)
	}
	return nil
}

// decodeLong decodes a little-endian two's-complement integer.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		shift := uint(64 - 8*len(b))
		return int64(v<<shift) >> shift
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	v := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if v.IsInt64() {
		return v.Int64()
	}
	return BigInt{v}
}

func latin1(b []byte) string {
	for _, c := range b {
		if c >= 0x80 {
			r := make([]rune, len(b))
			for i, c := range b {
				r[i] = rune(c)
			}
			return string(r)
		}
	}
	return string(b)
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// describe renders a value briefly for messages.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(truncate(x))
	case Global:
		return x.String()
	case *Call:
		if g, ok := x.Global(); ok {
			return g.String() + "(...)"
		}
		return "call(...)"
	default:
		return fmt.Sprintf("<%T>", v)
	}
}
