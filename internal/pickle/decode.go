package pickle

import (
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
)

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

// NextUnbuffered is where the next read of a file opened unbuffered starts
// (torch's legacy loader opens a tar's storages and tensors members with
// buffering=0): CPython's unpickler reads a FRAME whole from such a file,
// so after a STOP inside a frame the file stands at the frame's end.
func (r *Result) NextUnbuffered() int64 {
	if r.FrameEnd > r.End {
		return r.FrameEnd
	}
	return r.End
}

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
	t := &tree{}
	m := NewMachine[any](io.NewSectionReader(r, off, max(size-off, 0)), off, size, lim, t, nil)
	t.m = m
	v, err := m.Run()
	res := &Result{}
	*res = t.res
	res.Value = v
	res.Protocol = m.Protocol()
	res.Ops = m.Ops()
	res.End = m.Pos()
	res.FrameEnd, res.FrameLen = m.StopFrame()
	res.ErrAt = -1
	if err != nil {
		res.ErrAt = m.OpPos()
		return res, err
	}
	return res, nil
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

// tree is the Builder of the symbolic tree: every opcode is kept as what
// it would have made or called.
type tree struct {
	m   *Machine[any]
	res Result
}

func (t *tree) global(g Global, op string, resolved bool, detail string) {
	t.res.Globals = append(t.res.Globals, GlobalRef{Global: g, Offset: t.m.OpPos(), Opcode: op, Resolved: resolved, Detail: detail, Proto: t.m.Protocol()})
}

// Pack and Unpack keep None, bools and small ints in the memo as words.
func (t *tree) Pack(v any) (uint32, bool) { return packScalar(v) }

func (t *tree) Unpack(w uint32) any {
	v, _ := unpackScalar(w)
	return v
}

func (t *tree) Proto(int) error     { return nil }
func (t *tree) None() any           { return None{} }
func (t *tree) Bool(b bool) any     { return b }
func (t *tree) Int(i int64) any     { return i }
func (t *tree) Float(f float64) any { return f }
func (t *tree) EmptyTuple() any     { return Tuple{} }
func (t *tree) EmptyList() any      { return &List{} }
func (t *tree) EmptyDict() any      { return &Dict{} }
func (t *tree) EmptySet() any       { return &Set{} }

func (t *tree) Long(le []byte, n uint64) (any, error) {
	if le == nil && n > 0 {
		return LargeInt{Digits: int(n) * 2}, nil
	}
	return decodeLong(le), nil
}

func (t *tree) Parsed(op byte, v any) (any, error) { return v, nil }

func (t *tree) Text(op byte, b []byte) (any, error) {
	if op == opBinString || op == opShortBinString {
		// Python 2 str: decoded as latin-1 by torch's loader; keep text.
		return latin1(b), nil
	}
	return string(b), nil
}

func (t *tree) Bytes(op byte, b []byte) (any, error) { return Bytes(append([]byte(nil), b...)), nil }

func (t *tree) Tuple(items []any) (any, error) { return Tuple(append([]any(nil), items...)), nil }

func (t *tree) List(items []any) (any, error) { return &List{Items: append([]any(nil), items...)}, nil }

func (t *tree) Dict(items []any) (any, error) {
	return NewDict(items...), nil
}

func (t *tree) FrozenSet(items []any) (any, error) {
	return &Set{Items: append([]any(nil), items...), Frozen: true}, nil
}

func (t *tree) Append(target *any, items []any) error {
	switch c := (*target).(type) {
	case *List:
		c.Items = append(c.Items, items...)
	case *Call:
		c.ListItems = append(c.ListItems, items...)
	default:
		return opaqueErr(c, "APPEND to %T", c)
	}
	return nil
}

func (t *tree) SetItems(target *any, kv []any) error {
	switch c := (*target).(type) {
	case *List:
		// list[index] = value: an int index in range; what a call
		// returned may be an int's subclass or have __index__
		for i := 0; i < len(kv); i += 2 {
			var k int64
			switch x := kv[i].(type) {
			case int64:
				k = x
			case bool:
				if x {
					k = 1
				}
			case *Call:
				return opaqueErr(x, "SETITEM on a list with a %s index", describe(x))
			default:
				return fmt.Errorf("SETITEM on a list with a %T index", kv[i])
			}
			if k < 0 {
				k += int64(len(c.Items))
			}
			if k < 0 || k >= int64(len(c.Items)) {
				return fmt.Errorf("SETITEM on a list of %d items at %v: list assignment index out of range", len(c.Items), kv[i])
			}
			c.Items[k] = kv[i+1]
		}
	case *Dict:
		c.setPairs(kv)
	case *Call:
		if c.DictItems == nil {
			c.DictItems = &Dict{}
		}
		c.DictItems.setPairs(kv)
	default:
		return opaqueErr(c, "SETITEM on %T", c)
	}
	return nil
}

// setPairs sets the items kv (key, value, key, value, ...) of a SETITEMS
// on d, in order.
func (d *Dict) setPairs(kv []any) {
	for i := 0; i < len(kv); i += 2 {
		d.set(kv[i], kv[i+1])
	}
}

func (t *tree) AddItems(target *any, items []any) error {
	switch x := (*target).(type) {
	case *Set:
		x.Items = append(x.Items, items...)
		return nil
	case *Call:
		// a set that builtins.set or frozenset built: PySet_Check holds
		if g, ok := x.Global(); ok && (g == Global{"builtins", "set"} || g == Global{"__builtin__", "set"}) {
			x.ListItems = append(x.ListItems, items...)
			return nil
		}
	}
	return opaqueErr(*target, "ADDITEMS on %T", *target)
}

func (t *tree) Global(op byte, mod, name string) (any, error) {
	g := Global{Module: mod, Name: name}
	t.global(g, "GLOBAL", true, "")
	return g, nil
}

func (t *tree) StackGlobal(mv, nv any) (any, error) {
	ms, ok1 := mv.(string)
	ns, ok2 := nv.(string)
	if !ok1 || !ok2 {
		g := Global{Module: describe(mv), Name: describe(nv)}
		t.global(g, "STACK_GLOBAL", false, fmt.Sprintf("operands are %T and %T, not strings", mv, nv))
		return g, nil
	}
	g := Global{Module: ms, Name: ns}
	t.global(g, "STACK_GLOBAL", true, "")
	return g, nil
}

func (t *tree) Ext(op byte, code int32) (any, error) {
	t.res.Exts = append(t.res.Exts, code)
	t.global(Global{Module: "<extension registry>", Name: fmt.Sprint(code)}, opName(op), false, "extension registry codes cannot be resolved without Python's copyreg")
	return Ext{Code: code}, nil
}

func (t *tree) PersID(id any, text bool) (any, error) {
	t.res.PersIDs++
	t.res.PersIDList = append(t.res.PersIDList, PersIDRef{Offset: t.m.OpPos(), ID: id})
	return PersID{ID: id}, nil
}

// CallRef is one call opcode and the Call node it built (a later BUILD
// sets the node's State).
type CallRef struct {
	Offset int64
	Opcode string
	Call   *Call
}

func (t *tree) call(c *Call, op string) *Call {
	t.res.Calls = append(t.res.Calls, CallRef{Offset: t.m.OpPos(), Opcode: op, Call: c})
	return c
}

// callArgs checks the argument tuple of REDUCE, NEWOBJ and NEWOBJ_EX as
// CPython does (PyTuple_Check): a tuple, or what a call returned, which may
// be a tuple's subclass (torch.Size); anything else stops CPython too.
func (t *tree) callArgs(op string, a any, c *Call) error {
	switch x := a.(type) {
	case Tuple:
		c.Args = x
	case *Call:
		c.ArgsValue = a
	default:
		return fmt.Errorf("%s arguments are %T, not a tuple", op, a)
	}
	return nil
}

func (t *tree) Reduce(fn, a any) (any, error) {
	c := &Call{Func: fn}
	if err := t.callArgs("REDUCE", a, c); err != nil {
		return nil, err
	}
	return t.call(c, "REDUCE"), nil
}

func (t *tree) NewObj(cls, a any) (any, error) {
	c := &Call{Func: cls, New: true}
	if err := t.callArgs("NEWOBJ", a, c); err != nil {
		return nil, err
	}
	return t.call(c, "NEWOBJ"), nil
}

func (t *tree) NewObjEx(cls, a, kw any) (any, error) {
	c := &Call{Func: cls, New: true}
	if err := t.callArgs("NEWOBJ_EX", a, c); err != nil {
		return nil, err
	}
	// PyDict_Check: a dict, or what a call returned (an OrderedDict)
	switch x := kw.(type) {
	case *Dict:
		c.Kwargs = x
	case *Call:
		c.KwargsValue = kw
	default:
		return nil, fmt.Errorf("NEWOBJ_EX keywords are %T, not a dict", kw)
	}
	return t.call(c, "NEWOBJ_EX"), nil
}

func (t *tree) Inst(mod, name string, args []any) (any, error) {
	g := Global{Module: mod, Name: name}
	t.global(g, "INST", true, "")
	return t.call(&Call{Func: g, Args: Tuple(append([]any(nil), args...))}, "INST"), nil
}

func (t *tree) Obj(cls any, args []any) (any, error) {
	return t.call(&Call{Func: cls, Args: Tuple(append([]any(nil), args...))}, "OBJ"), nil
}

func (t *tree) Build(target *any, state any) error {
	v := *target
	t.res.Builds = append(t.res.Builds, Build{Offset: t.m.OpPos(), Target: v})
	if _, isStr := v.(string); isStr {
		// A str has no __setstate__ and no __dict__: Python leaves it as
		// it is (state None) or fails. It stays a str, so a STACK_GLOBAL
		// operand built this way is still read.
		return nil
	}
	c, ok := v.(*Call)
	if !ok {
		// BUILD on a Global or container still means a __setstate__
		// call; wrap it so the state is kept.
		*target = &Call{Func: Global{Module: "<build>", Name: describe(v)}, Args: Tuple{v}, State: state, HasState: true}
		return nil
	}
	c.State, c.HasState = state, true
	return nil
}

func (t *tree) NextBuffer(i int) (any, error) {
	t.res.Buffers++
	return Buffer{Index: i}, nil
}

func (t *tree) ReadonlyBuffer(*any) error { return nil }

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
