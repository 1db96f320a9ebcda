package pickle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"
)

// Builder makes the values of one view of a pickle: the machine reads the
// opcodes and their operands, keeps the stack, the marks and the memo, and
// enforces every bound; the builder says what each value is. The
// checkpoint view (Decode) builds a symbolic tree of every opcode; the
// snapshot view builds its typed model and refuses anything but plain data.
//
// Slices of items passed to a builder alias the machine's stack and are
// valid only during the call: a builder that keeps them copies them.
// Target pointers (Append, SetItems, AddItems, Build, ReadonlyBuffer) point
// at the stack's top value, which the builder may replace. An error from a
// builder stops the decode at that opcode.
type Builder[V any] interface {
	Proto(p int) error
	None() V
	Bool(b bool) V
	Int(i int64) V
	// Long is LONG1/LONG4: le is a little-endian two's complement integer
	// (LargeInt when over 64 KiB, le nil then).
	Long(le []byte, n uint64) (V, error)
	Float(f float64) V
	// Parsed is a protocol 0 text operand as CPython reads it (int64,
	// bool, BigInt, LargeInt, float64 or string); op is its opcode.
	Parsed(op byte, v any) (V, error)
	// Text is a str operand (UTF-8 checked for BINUNICODE*; a Python 2
	// str's bytes for BINSTRING, SHORT_BINSTRING).
	Text(op byte, b []byte) (V, error)
	Bytes(op byte, b []byte) (V, error)
	EmptyTuple() V
	Tuple(items []V) (V, error)
	EmptyList() V
	List(items []V) (V, error)
	EmptyDict() V
	Dict(items []V) (V, error)
	EmptySet() V
	FrozenSet(items []V) (V, error)
	Append(target *V, items []V) error
	SetItems(target *V, kv []V) error
	AddItems(target *V, items []V) error
	Global(op byte, mod, name string) (V, error)
	StackGlobal(mod, name V) (V, error)
	Reduce(fn, args V) (V, error)
	NewObj(cls, args V) (V, error)
	NewObjEx(cls, args, kwargs V) (V, error)
	Inst(mod, name string, args []V) (V, error)
	Obj(cls V, args []V) (V, error)
	Build(target *V, state V) error
	PersID(id V, text bool) (V, error)
	Ext(op byte, code int32) (V, error)
	NextBuffer(index int) (V, error)
	ReadonlyBuffer(target *V) error
}

// MemoWatcher is a Builder that hears where values are memoised: a view
// that turns a memoised value into another (a typed record) puts it back
// with Machine.SetMemo.
type MemoWatcher[V any] interface {
	Memoized(k uint64, v *V)
}

// Packer is a Builder whose small scalar values (None, bools, small ints:
// what a flood of memoised values mostly is) the machine may keep in the
// memo as 4-byte words rather than as values: Pack says whether v is one
// and its word (never 0), Unpack makes the value back. Only values a view
// tells apart by their value alone, never by their identity (None, bools,
// ints), may pack: a memo read of a word is a new value equal to the one
// memoised.
type Packer[V any] interface {
	Pack(v V) (uint32, bool)
	Unpack(w uint32) V
}

// Limits bounds one decode. The absolute bounds (MaxStack, MaxMemo, ...)
// stop a file that claims more than any real one holds; the proportional
// ones keep what a decode holds in proportion to the bytes it has read: the
// stack may pass Slack values only by one for every BytesPer bytes read,
// the memo entries and the containers built together only by one for every
// MemoBytesPer bytes (a pickler writes at least an opcode and a MEMOIZE, or
// an opcode and its operand, for each). So a flood of one-byte opcodes (DUP,
// EMPTY_LIST, MEMOIZE) costs a few bytes of memory per byte of input, never
// a hundred.
type Limits struct {
	MaxBytes  int64 // bytes of pickle consumed
	MaxOps    int   // opcodes executed
	MaxMemo   int   // memo entries (the memo is sparse: an index costs one entry)
	MaxStack  int   // values on the stack and in all marks together
	MaxMarks  int   // nested MARKs
	MaxDepth  int   // nesting of containers and calls as they are built
	MaxString int64 // one string/bytes value
	// Slack, BytesPer and MemoBytesPer: the stack stays under Slack +
	// (bytes read)/BytesPer values; the memo entries and the containers
	// built together under Slack + (bytes read)/MemoBytesPer. Zero means
	// 1<<18, 4 and 2.
	Slack        int
	BytesPer     int
	MemoBytesPer int
}

// DefaultLimits fit the pickle of any real checkpoint (a state_dict with a
// hundred thousand tensors is a few tens of MiB of pickle).
var DefaultLimits = Limits{
	MaxBytes:     256 << 20,
	MaxOps:       50_000_000,
	MaxMemo:      5_000_000,
	MaxStack:     5_000_000,
	MaxMarks:     10_000,
	MaxDepth:     1_000,
	MaxString:    64 << 20,
	Slack:        1 << 18,
	BytesPer:     4,
	MemoBytesPer: 2,
}

// ErrLimit is wrapped by errors that come from a bound in Limits.
var ErrLimit = errors.New("pickle limit exceeded")

var errTruncated = errors.New("pickle truncated")

// Machine runs the opcodes of one pickle, building values through B.
type Machine[V any] struct {
	src    src
	lim    Limits
	b      Builder[V]
	watch  MemoWatcher[V]
	pack   Packer[V]
	stack  []V
	depths []int32 // nesting depth of each stack value
	marks  []int
	// The memo: dense while indices come in order (MEMOIZE, a pickler's
	// PUTs), in pages that never move, and a map for any index out of
	// order, so an index costs one entry whatever its value. A page of
	// values exists only once a value that does not pack (Packer) is
	// memoised there, a page of words once one that packs is, a page of
	// depths once a value nested in something is.
	memo       [][]V
	memoWord   [][]uint32
	memoDepth  [][]int32
	memoN      int // dense entries
	sparse     map[uint64]memoEnt[V]
	popped     int32 // depth of the last popped value, or the deepest popped by popMark
	containers int   // containers built (the proportional bound)
	ops        int
	proto      int
	opPos      int64
	nbuf       int
	// frameEnd and frameLen: the last FRAME read, where it ends.
	frameEnd, frameLen int64
	stopFrameEnd       int64
	stopFrameLen       int64
}

type memoEnt[V any] struct {
	v     V
	depth int32
}

// NewMachine makes a machine that reads one pickle from r, which starts at
// absolute offset start (what errors and End count from) and ends at size
// (-1 when unknown). progress, when not nil, hears the bytes read every few
// MiB.
func NewMachine[V any](r io.Reader, start, size int64, lim Limits, b Builder[V], progress func(int64)) *Machine[V] {
	orDefault(&lim.MaxOps, DefaultLimits.MaxOps)
	orDefault(&lim.MaxBytes, math.MaxInt64)
	orDefault(&lim.MaxDepth, DefaultLimits.MaxDepth)
	orDefault(&lim.MaxMarks, DefaultLimits.MaxMarks)
	orDefault(&lim.Slack, DefaultLimits.Slack)
	orDefault(&lim.BytesPer, DefaultLimits.BytesPer)
	orDefault(&lim.MemoBytesPer, DefaultLimits.MemoBytesPer)
	maxLine := lim.MaxString
	if maxLine < 1<<20 {
		maxLine = 1 << 20
	}
	m := &Machine[V]{
		src: src{r: r, off: start, start: start, size: size, max: lim.MaxBytes, maxLine: maxLine, progress: progress,
			buf: make([]byte, 64<<10)},
		lim: lim, b: b, opPos: start,
	}
	m.watch, _ = b.(MemoWatcher[V])
	m.pack, _ = b.(Packer[V])
	return m
}

// orDefault sets a limit that is not positive to d.
func orDefault[T int | int64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// SetMemo replaces the value memoised at k, when there is one.
func (m *Machine[V]) SetMemo(k uint64, v V) {
	if k < uint64(m.memoN) {
		p, i := k/memoPage, k%memoPage
		if m.memo[p] == nil {
			m.memo[p] = make([]V, memoPage)
		}
		m.memo[p][i] = v
		if w := m.memoWord[p]; w != nil {
			w[i] = 0
		}
	} else if e, ok := m.sparse[k]; ok {
		e.v = v
		m.sparse[k] = e
	}
}

// Run reads up to and including STOP and returns the value STOP left.
func (m *Machine[V]) Run() (V, error) {
	v, err := m.run()
	if err != nil {
		var zero V
		return zero, fmt.Errorf("pickle at byte %d: %w", m.opPos, err)
	}
	return v, nil
}

// Pos is the absolute offset of the next byte to read (just past STOP once
// Run returned).
func (m *Machine[V]) Pos() int64 { return m.src.off }

// OpPos is the absolute offset of the opcode being run (or that failed).
func (m *Machine[V]) OpPos() int64 { return m.opPos }

// Protocol is the protocol in force: the last PROTO opcode's, 0 before any.
func (m *Machine[V]) Protocol() int { return m.proto }

// Ops is the count of opcodes run.
func (m *Machine[V]) Ops() int { return m.ops }

// StopFrame is, when STOP came inside a FRAME, where that frame ends and
// its length: CPython's unpickler has read the whole frame, and a reader
// that cannot give back what it read ahead starts the next pickle there.
func (m *Machine[V]) StopFrame() (end, length int64) { return m.stopFrameEnd, m.stopFrameLen }

// src is a forward reader with a read-ahead window.
type src struct {
	r          io.Reader
	buf        []byte
	pos, end   int   // buf[pos:end] is read ahead
	off        int64 // absolute offset of buf[pos]
	start      int64
	size       int64 // absolute end; -1 when unknown
	max        int64 // bytes a decode may consume
	maxLine    int64 // longest text operand line
	eof        bool
	progress   func(int64)
	lastReport int64
}

// read is the bytes consumed so far.
func (s *src) read() int64 { return s.off - s.start }

// fill makes n bytes readable at buf[pos:].
func (s *src) fill(n int) error {
	if s.end-s.pos >= n {
		return nil
	}
	if s.size >= 0 && s.off+int64(n) > s.size {
		return errTruncated
	}
	if s.read()+int64(n) > s.max {
		return fmt.Errorf("%w: pickle longer than %d bytes", ErrLimit, s.max)
	}
	if n > len(s.buf) {
		nb := make([]byte, n)
		s.end = copy(nb, s.buf[s.pos:s.end])
		s.buf, s.pos = nb, 0
	} else {
		s.end = copy(s.buf, s.buf[s.pos:s.end])
		s.pos = 0
	}
	for s.end < n && !s.eof {
		want := len(s.buf)
		if s.size >= 0 {
			// never read past the pickle's end: a caller reads what follows
			if left := s.size - s.off; int64(want) > left {
				want = int(left)
			}
		}
		if want <= s.end {
			break
		}
		k, err := s.r.Read(s.buf[s.end:want])
		s.end += k
		if err == io.EOF {
			s.eof = true
		} else if err != nil {
			return err
		}
	}
	if s.end-s.pos < n {
		return errTruncated
	}
	return nil
}

func (s *src) advance(n int) {
	s.pos += n
	s.off += int64(n)
	if s.progress != nil && s.off-s.lastReport >= 4<<20 {
		s.lastReport = s.off
		s.progress(s.read())
	}
}

// bytes returns the next n bytes, valid until the next read.
func (s *src) bytes(n int64) ([]byte, error) {
	if n < 0 || n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: a length of %d", ErrLimit, n)
	}
	if err := s.fill(int(n)); err != nil {
		return nil, err
	}
	b := s.buf[s.pos : s.pos+int(n)]
	s.advance(int(n))
	return b, nil
}

func (s *src) byte() (byte, error) {
	if s.pos < s.end {
		c := s.buf[s.pos]
		s.advance(1)
		return c, nil
	}
	b, err := s.bytes(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// line reads up to and excluding '\n' (at most maxLine bytes).
func (s *src) line() (string, error) {
	var out []byte
	for {
		if s.pos == s.end {
			if err := s.fill(1); err != nil {
				return "", err
			}
		}
		chunk := s.buf[s.pos:s.end]
		for i, c := range chunk {
			if c == '\n' {
				out = append(out, chunk[:i]...)
				s.advance(i + 1)
				if int64(len(out)) > s.maxLine {
					return "", fmt.Errorf("%w: text line over %d bytes", ErrLimit, s.maxLine)
				}
				return string(out), nil
			}
		}
		out = append(out, chunk...)
		s.advance(len(chunk))
		if int64(len(out)) > s.maxLine {
			return "", fmt.Errorf("%w: text line over %d bytes", ErrLimit, s.maxLine)
		}
	}
}

// budget is what the stack may reach now.
func (m *Machine[V]) budget() int {
	return m.lim.Slack + int(m.src.read()/int64(m.lim.BytesPer))
}

// halfBudget is what the memo and the count of containers may reach now.
func (m *Machine[V]) halfBudget() int {
	return m.lim.Slack + int(m.src.read()/int64(m.lim.MemoBytesPer))
}

func (m *Machine[V]) push(v V) error { return m.pushD(v, 0) }

// pushD pushes a value nested depth levels deep.
func (m *Machine[V]) pushD(v V, depth int32) error {
	if n := len(m.stack); n >= m.lim.MaxStack || n >= m.budget() {
		if n >= m.lim.MaxStack {
			return fmt.Errorf("%w: stack over %d values", ErrLimit, m.lim.MaxStack)
		}
		return fmt.Errorf("%w: stack of %d values after %d bytes (the stack holds at most one value per %d bytes read)",
			ErrLimit, n, m.src.read(), m.lim.BytesPer)
	}
	if int(depth) > m.lim.MaxDepth {
		return fmt.Errorf("%w: nesting deeper than %d", ErrLimit, m.lim.MaxDepth)
	}
	if len(m.stack) == cap(m.stack) {
		// double: append's growth of large slices copies five times over
		c := max(2*cap(m.stack), 64)
		m.stack = append(make([]V, 0, c), m.stack...)
		m.depths = append(make([]int32, 0, c), m.depths...)
	}
	m.stack = append(m.stack, v)
	m.depths = append(m.depths, depth)
	return nil
}

// container counts one container built against the proportional bound.
func (m *Machine[V]) container() error {
	m.containers++
	if m.containers+m.memoLen() > m.halfBudget() {
		return fmt.Errorf("%w: %d containers and %d memo entries after %d bytes (at most one per %d bytes read)",
			ErrLimit, m.containers, m.memoLen(), m.src.read(), m.lim.MemoBytesPer)
	}
	return nil
}

// nest pushes a container built from the last popped values.
func (m *Machine[V]) nest(v V) error { return m.pushD(v, m.popped+1) }

// deepen records that the value on top now holds something of depth.
func (m *Machine[V]) deepen(depth int32) error {
	i := len(m.depths) - 1
	if i < 0 {
		return nil
	}
	if depth+1 > m.depths[i] {
		if int(depth+1) > m.lim.MaxDepth {
			return fmt.Errorf("%w: nesting deeper than %d", ErrLimit, m.lim.MaxDepth)
		}
		m.depths[i] = depth + 1
	}
	return nil
}

func (m *Machine[V]) base() int {
	if len(m.marks) > 0 {
		return m.marks[len(m.marks)-1]
	}
	return 0
}

func (m *Machine[V]) pop() (V, error) {
	n := len(m.stack)
	if n <= m.base() {
		var zero V
		return zero, errors.New("stack underflow")
	}
	v := m.stack[n-1]
	m.popped = m.depths[n-1]
	m.stack = m.stack[:n-1]
	m.depths = m.depths[:n-1]
	return v, nil
}

// top is the top value, which the caller may replace.
func (m *Machine[V]) top() (*V, error) {
	n := len(m.stack)
	if n <= m.base() {
		return nil, errors.New("stack underflow")
	}
	return &m.stack[n-1], nil
}

// popMark returns the items above the last MARK and removes them and it.
// The slice aliases the stack: valid until the next push.
func (m *Machine[V]) popMark() ([]V, error) {
	if len(m.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	k := m.marks[len(m.marks)-1]
	m.marks = m.marks[:len(m.marks)-1]
	items := m.stack[k:]
	m.popped = 0
	for _, x := range m.depths[k:] {
		if x > m.popped {
			m.popped = x
		}
	}
	m.stack = m.stack[:k]
	m.depths = m.depths[:k]
	return items, nil
}

// memoBudget says whether one more memo entry is within the proportional
// bound.
func (m *Machine[V]) memoBudget() error {
	if n := m.memoLen(); n+m.containers >= m.halfBudget() {
		return fmt.Errorf("%w: memo of %d entries and %d containers after %d bytes (at most one per %d bytes read)", ErrLimit, n, m.containers, m.src.read(), m.lim.MemoBytesPer)
	}
	return nil
}

// memoLen is the count of memo entries (MEMOIZE's index).
func (m *Machine[V]) memoLen() int { return m.memoN + len(m.sparse) }

const memoPage = 1 << 12

// dense returns the dense entry k < memoN and its depth.
func (m *Machine[V]) dense(k uint64) (V, int32) {
	p, i := k/memoPage, k%memoPage
	if w := m.memoWord[p]; w != nil && w[i] != 0 {
		return m.pack.Unpack(w[i]), 0
	}
	var depth int32
	if d := m.memoDepth[p]; d != nil {
		depth = d[i]
	}
	return m.memo[p][i], depth
}

// setDense sets the dense entry k <= memoN.
func (m *Machine[V]) setDense(k uint64, v V, depth int32) {
	p, i := k/memoPage, k%memoPage
	if p == uint64(len(m.memo)) {
		m.memo = append(m.memo, nil)
		m.memoWord = append(m.memoWord, nil)
		m.memoDepth = append(m.memoDepth, nil)
	}
	if k == uint64(m.memoN) {
		m.memoN++
	}
	if m.pack != nil && depth == 0 {
		if w, ok := m.pack.Pack(v); ok {
			if m.memoWord[p] == nil {
				m.memoWord[p] = make([]uint32, memoPage)
			}
			m.memoWord[p][i] = w
			if m.memo[p] != nil {
				var zero V
				m.memo[p][i] = zero
			}
			if m.memoDepth[p] != nil {
				m.memoDepth[p][i] = 0
			}
			return
		}
	}
	if m.memo[p] == nil {
		m.memo[p] = make([]V, memoPage)
	}
	m.memo[p][i] = v
	if w := m.memoWord[p]; w != nil {
		w[i] = 0
	}
	if depth != 0 && m.memoDepth[p] == nil {
		m.memoDepth[p] = make([]int32, memoPage)
	}
	if m.memoDepth[p] != nil {
		m.memoDepth[p][i] = depth
	}
}

// memoPut stores the value on top of the stack at k.
func (m *Machine[V]) memoPut(k uint64) error {
	n := len(m.stack)
	if n == 0 || n == m.base() {
		return errors.New("stack underflow")
	}
	v, depth := m.stack[n-1], m.depths[n-1]
	if m.watch != nil {
		m.watch.Memoized(k, &m.stack[n-1])
	}
	switch {
	case k < uint64(m.memoN):
		m.setDense(k, v, depth)
		return nil
	case k == uint64(m.memoN):
		if err := m.memoBudget(); err != nil {
			if _, ok := m.sparse[k]; !ok {
				return err
			}
		}
		if m.memoLen() >= m.lim.MaxMemo {
			if _, ok := m.sparse[k]; !ok {
				return fmt.Errorf("%w: memo over %d entries", ErrLimit, m.lim.MaxMemo)
			}
		}
		delete(m.sparse, k)
		m.setDense(k, v, depth)
		// entries put out of order that now follow on join the dense part
		for len(m.sparse) > 0 {
			e, ok := m.sparse[uint64(m.memoN)]
			if !ok {
				break
			}
			delete(m.sparse, uint64(m.memoN))
			m.setDense(uint64(m.memoN), e.v, e.depth)
		}
		return nil
	}
	if _, ok := m.sparse[k]; !ok {
		if m.memoLen() >= m.lim.MaxMemo {
			return fmt.Errorf("%w: memo over %d entries (index %d)", ErrLimit, m.lim.MaxMemo, k)
		}
		if err := m.memoBudget(); err != nil {
			return err
		}
	}
	if m.sparse == nil {
		m.sparse = map[uint64]memoEnt[V]{}
	}
	m.sparse[k] = memoEnt[V]{v, depth}
	return nil
}

func (m *Machine[V]) memoGet(k uint64) error {
	if k < uint64(m.memoN) {
		return m.pushD(m.dense(k))
	}
	e, ok := m.sparse[k]
	if !ok {
		return fmt.Errorf("memo %d read before it was written", k)
	}
	return m.pushD(e.v, e.depth)
}

// memoKey reads the memo index of a PUT or GET opcode: a decimal line (p,
// g), one byte (q, h) or four little-endian bytes (r, j).
func (m *Machine[V]) memoKey(op byte) (uint64, error) {
	switch op {
	case opPut, opGet:
		l, err := m.src.line()
		if err != nil {
			return 0, err
		}
		return parseMemoKey(l)
	case opBinPut, opBinGet:
		b, err := m.src.byte()
		return uint64(b), err
	}
	return m.uint(4)
}

// uint reads an unsigned little-endian integer of width 1, 2, 4 or 8 bytes.
func (m *Machine[V]) uint(width int) (uint64, error) {
	b, err := m.src.bytes(int64(width))
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := width - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

// operandWidth is the byte width of the integer operand of the BININT,
// LONG1/LONG4, string, bytes and extension opcodes.
func operandWidth(op byte) int {
	switch op {
	case opShortBinString, opShortBinBytes, opShortBinUni, opExt1, opBinInt1, opLong1:
		return 1
	case opExt2, opBinInt2:
		return 2
	case opBinString, opBinBytes, opBinUnicode, opExt4, opBinInt, opLong4:
		return 4
	}
	return 8 // BINBYTES8, BYTEARRAY8, BINUNICODE8
}

// str reads n bytes of a string operand (valid until the next read).
func (m *Machine[V]) str(n uint64) ([]byte, error) {
	if n > uint64(m.lim.MaxString) {
		return nil, fmt.Errorf("%w: a string of %d bytes is over the %d-byte limit", ErrLimit, n, m.lim.MaxString)
	}
	return m.src.bytes(int64(n))
}

func (m *Machine[V]) run() (V, error) {
	var zero V
	s := &m.src
	for {
		if m.ops >= m.lim.MaxOps {
			return zero, fmt.Errorf("%w: over %d opcodes", ErrLimit, m.lim.MaxOps)
		}
		m.ops++
		m.opPos = s.off
		// The opcodes most of a large pickle is made of (memo reads and
		// writes, small ints, marks) are run here when their operands are
		// in the read-ahead.
		if s.end-s.pos >= 5 {
			b := s.buf[s.pos:s.end]
			var v V
			var depth int32
			n := 0
			switch b[0] {
			case opBinGet:
				if k := uint64(b[1]); k < uint64(m.memoN) {
					v, depth = m.dense(k)
					n = 2
				}
			case opLongBinGet:
				if k := uint64(binary.LittleEndian.Uint32(b[1:])); k < uint64(m.memoN) {
					v, depth = m.dense(k)
					n = 5
				}
			case opBinInt1:
				v, n = m.b.Int(int64(b[1])), 2
			}
			if n > 0 {
				op := b[0]
				s.advance(n)
				if err := m.pushD(v, depth); err != nil {
					return zero, fmt.Errorf("opcode %s: %w", opName(op), err)
				}
				continue
			}
		}
		op, err := s.byte()
		if err != nil {
			return zero, err
		}
		if op == opStop {
			if len(m.stack) == 0 {
				return zero, errors.New("opcode '.': STOP on an empty stack")
			}
			if s.off < m.frameEnd {
				m.stopFrameEnd, m.stopFrameLen = m.frameEnd, m.frameLen
			}
			return m.stack[len(m.stack)-1], nil
		}
		if err := m.step(op); err != nil {
			return zero, fmt.Errorf("opcode %s: %w", opName(op), err)
		}
	}
}

// nestB pushes what a builder made from popped values, as a container.
func (m *Machine[V]) nestB(v V, err error) error {
	if err != nil {
		return err
	}
	if err := m.container(); err != nil {
		return err
	}
	return m.nest(v)
}

func (m *Machine[V]) pushB(v V, err error) error {
	if err != nil {
		return err
	}
	return m.push(v)
}

// popN removes the top n values above the last MARK and returns them, in
// stack order (aliasing the stack: valid until the next push); m.popped is
// the deepest of them.
func (m *Machine[V]) popN(n int) ([]V, error) {
	k := len(m.stack) - n
	if k < m.base() {
		return nil, errors.New("stack underflow")
	}
	items := m.stack[k:]
	m.popped = 0
	for _, x := range m.depths[k:] {
		m.popped = max(m.popped, x)
	}
	m.stack, m.depths = m.stack[:k], m.depths[:k]
	return items, nil
}

// popItems removes what an item opcode adds (n values, or all above the
// last MARK when n is 0) and returns them with the value they go into,
// which the caller may replace.
func (m *Machine[V]) popItems(n int) ([]V, *V, error) {
	var items []V
	var err error
	if n == 0 {
		items, err = m.popMark()
	} else {
		items, err = m.popN(n)
	}
	if err != nil {
		return nil, nil, err
	}
	t, err := m.top()
	return items, t, err
}

// lines reads the two text lines of GLOBAL and INST.
func (m *Machine[V]) lines() (mod, name string, err error) {
	if mod, err = m.src.line(); err != nil {
		return "", "", err
	}
	name, err = m.src.line()
	return mod, name, err
}

// emptyContainer pushes an empty mutable container, counted against the
// proportional bound.
func (m *Machine[V]) emptyContainer(v V) error {
	if err := m.container(); err != nil {
		return err
	}
	return m.push(v)
}

func (m *Machine[V]) step(op byte) error {
	b := m.b
	switch op {
	case opProto:
		p, err := m.src.byte()
		if err != nil {
			return err
		}
		if p > 5 {
			return fmt.Errorf("unsupported protocol %d", p)
		}
		m.proto = int(p)
		return b.Proto(int(p))
	case opFrame:
		n, err := m.uint(8)
		if err != nil {
			return err
		}
		if int64(n) < 0 || (m.src.size >= 0 && m.src.off+int64(n) > m.src.size) {
			return fmt.Errorf("frame of %d bytes runs past the input: %w", n, errTruncated)
		}
		m.frameEnd, m.frameLen = m.src.off+int64(n), int64(n)
		return nil
	case opMark:
		if len(m.marks) >= m.lim.MaxMarks {
			return fmt.Errorf("%w: over %d nested marks", ErrLimit, m.lim.MaxMarks)
		}
		m.marks = append(m.marks, len(m.stack))
		return nil
	case opPop:
		if len(m.marks) > 0 && len(m.stack) == m.marks[len(m.marks)-1] {
			// POP of a MARK (pickletools allows it).
			m.marks = m.marks[:len(m.marks)-1]
			return nil
		}
		_, err := m.pop()
		return err
	case opPopMark:
		_, err := m.popMark()
		return err
	case opDup:
		t, err := m.top()
		if err != nil {
			return err
		}
		return m.pushD(*t, m.depths[len(m.depths)-1])
	case opNone:
		return m.push(b.None())
	case opNewTrue, opNewFalse:
		return m.push(b.Bool(op == opNewTrue))
	case opInt, opLong, opFloat, opString, opUnicode:
		l, err := m.src.line()
		if err != nil {
			return err
		}
		var v any
		switch op {
		case opInt:
			v, err = parseIntOperand(l)
		case opLong:
			v, err = parseLongOperand(l)
		case opFloat:
			v, err = parseFloatOperand(l)
		case opString:
			v, err = unquoteString(l)
		case opUnicode:
			v, err = rawUnicodeUnescape(l)
		}
		if err != nil {
			return err
		}
		return m.pushB(b.Parsed(op, v))
	case opBinInt, opBinInt1, opBinInt2:
		v, err := m.uint(operandWidth(op))
		if err != nil {
			return err
		}
		if op == opBinInt {
			return m.push(b.Int(int64(int32(uint32(v)))))
		}
		return m.push(b.Int(int64(v)))
	case opLong1, opLong4:
		n, err := m.uint(operandWidth(op))
		if err != nil {
			return err
		}
		if op == opLong4 && int32(n) < 0 {
			return errors.New("negative LONG4 length")
		}
		if n > uint64(m.lim.MaxString) {
			return fmt.Errorf("%w: integer of %d bytes", ErrLimit, n)
		}
		le, err := m.src.bytes(int64(n))
		if err != nil {
			return err
		}
		if n > 1<<16 {
			le = nil // Python reads it; nothing here needs its value
		}
		return m.pushB(b.Long(le, n))
	case opBinFloat:
		v, err := m.src.bytes(8)
		if err != nil {
			return err
		}
		return m.push(b.Float(math.Float64frombits(binary.BigEndian.Uint64(v))))
	case opBinString, opShortBinString, opBinBytes, opShortBinBytes, opBinBytes8, opByteArray8,
		opBinUnicode, opShortBinUni, opBinUnicode8:
		n, err := m.uint(operandWidth(op))
		if err != nil {
			return err
		}
		if op == opBinString && int32(n) < 0 {
			return errors.New("negative BINSTRING length")
		}
		v, err := m.str(n)
		if err != nil {
			return err
		}
		switch op {
		case opBinUnicode, opShortBinUni, opBinUnicode8:
			if !utf8.Valid(v) {
				if err := utf8SurrogatePass(v); err != nil {
					return err
				}
			}
			return m.pushB(b.Text(op, v))
		case opBinString, opShortBinString:
			return m.pushB(b.Text(op, v))
		}
		return m.pushB(b.Bytes(op, v))
	case opNextBuffer:
		m.nbuf++
		return m.pushB(b.NextBuffer(m.nbuf - 1))
	case opReadonlyBuffer:
		t, err := m.top()
		if err != nil {
			return err
		}
		return b.ReadonlyBuffer(t)
	case opEmptyTuple:
		return m.push(b.EmptyTuple())
	case opEmptyList:
		return m.emptyContainer(b.EmptyList())
	case opEmptyDict:
		return m.emptyContainer(b.EmptyDict())
	case opEmptySet:
		return m.emptyContainer(b.EmptySet())
	case opTuple, opTuple1, opTuple2, opTuple3, opList, opDict, opFrozenSet:
		var items []V
		var err error
		if op >= opTuple1 && op <= opTuple3 {
			items, err = m.popN(int(op-opTuple1) + 1)
		} else {
			items, err = m.popMark()
		}
		if err != nil {
			return err
		}
		switch op {
		case opList:
			return m.nestB(b.List(items))
		case opDict:
			if len(items)%2 != 0 {
				return errors.New("DICT with an odd number of items")
			}
			return m.nestB(b.Dict(items))
		case opFrozenSet:
			return m.nestB(b.FrozenSet(items))
		}
		if len(items) == 0 {
			return m.push(b.EmptyTuple())
		}
		return m.nestB(b.Tuple(items))
	case opAppend, opAppends, opAddItems, opSetItem, opSetItems, opBuild:
		items, t, err := m.popItems(itemsPopped(op))
		if err != nil {
			return err
		}
		switch op {
		case opAppend, opAppends:
			err = b.Append(t, items)
		case opAddItems:
			err = b.AddItems(t, items)
		case opBuild:
			err = b.Build(t, items[0])
		default:
			if len(items)%2 != 0 {
				return errors.New("SETITEMS with an odd number of items")
			}
			err = b.SetItems(t, items)
		}
		if err != nil {
			return err
		}
		return m.deepen(m.popped)
	case opPut, opBinPut, opLongBinPut:
		k, err := m.memoKey(op)
		if err != nil {
			return err
		}
		return m.memoPut(k)
	case opMemoize:
		return m.memoPut(uint64(m.memoLen()))
	case opGet, opBinGet, opLongBinGet:
		k, err := m.memoKey(op)
		if err != nil {
			return err
		}
		return m.memoGet(k)
	case opGlobal:
		mod, name, err := m.lines()
		if err != nil {
			return err
		}
		if mod == "" || name == "" || !utf8.ValidString(mod) || !utf8.ValidString(name) {
			return fmt.Errorf("GLOBAL operands %q %q are not non-empty UTF-8", truncate(mod), truncate(name))
		}
		return m.pushB(b.Global(op, mod, name))
	case opInst:
		mod, name, err := m.lines()
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
		items, err := m.popMark()
		if err != nil {
			return err
		}
		return m.nestB(b.Inst(mod, name, items))
	case opObj:
		items, err := m.popMark()
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return errors.New("OBJ without a class")
		}
		return m.nestB(b.Obj(items[0], items[1:]))
	case opExt1, opExt2, opExt4:
		v, err := m.uint(operandWidth(op))
		if err != nil {
			return err
		}
		return m.pushB(b.Ext(op, int32(v)))
	case opPersID:
		l, err := m.src.line()
		if err != nil {
			return err
		}
		id, err := b.Parsed(op, l)
		if err != nil {
			return err
		}
		return m.pushB(b.PersID(id, true))
	case opStackGlobal, opBinPersID, opReduce, opNewObj, opNewObjEx:
		a, err := m.popN(callArgs(op))
		if err != nil {
			return err
		}
		switch op {
		case opStackGlobal:
			return m.pushB(b.StackGlobal(a[0], a[1]))
		case opBinPersID:
			return m.nestB(b.PersID(a[0], false))
		case opReduce:
			return m.nestB(b.Reduce(a[0], a[1]))
		case opNewObj:
			return m.nestB(b.NewObj(a[0], a[1]))
		}
		return m.nestB(b.NewObjEx(a[0], a[1], a[2]))
	}
	return errors.New("unknown opcode")
}

// itemsPopped is what an item opcode takes from the stack: 0 for all above
// the last MARK.
func itemsPopped(op byte) int {
	switch op {
	case opAppend, opBuild:
		return 1
	case opSetItem:
		return 2
	}
	return 0
}

// callArgs is what STACK_GLOBAL, BINPERSID and the call opcodes take from
// the stack.
func callArgs(op byte) int {
	switch op {
	case opBinPersID:
		return 1
	case opNewObjEx:
		return 3
	}
	return 2
}
