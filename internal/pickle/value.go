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
	"math/big"
)

// None is Python's None.
type None struct{}

// Tuple is a Python tuple.
type Tuple []any

// List is a Python list; a pointer so APPEND through the memo is seen by
// every reference, as in Python.
type List struct{ Items []any }

// Dict is a Python dict with its insertion order kept.
type Dict struct {
	Keys []any
	Vals []any
	// scalar keys -> position, so SETITEM stays O(1): typed maps, a
	// fraction of what one map of interfaces costs for millions of keys
	strIdx   map[string]int32
	intIdx   map[int64]int32
	floatIdx map[float64]int32
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

// DictGet returns the value for a string key.
func (d *Dict) Get(key string) (any, bool) {
	for i, k := range d.Keys {
		if s, ok := k.(string); ok && s == key {
			return d.Vals[i], true
		}
	}
	return nil, false
}

func (d *Dict) set(k, v any) {
	// Only scalar keys are deduplicated; anything else is appended, which
	// keeps decoding linear and is what a report needs. A bool is the int
	// it equals, as a Python dict has it.
	n := int32(len(d.Keys))
	var i int32
	var ok bool
	switch x := k.(type) {
	case string:
		if d.strIdx == nil {
			d.strIdx = map[string]int32{}
		}
		if i, ok = d.strIdx[x]; !ok {
			d.strIdx[x] = n
		}
	case int64, bool:
		var key int64
		if b, isBool := x.(bool); isBool {
			if b {
				key = 1
			}
		} else {
			key = x.(int64)
		}
		if d.intIdx == nil {
			d.intIdx = map[int64]int32{}
		}
		if i, ok = d.intIdx[key]; !ok {
			d.intIdx[key] = n
		}
	case float64:
		if d.floatIdx == nil {
			d.floatIdx = map[float64]int32{}
		}
		if i, ok = d.floatIdx[x]; !ok {
			d.floatIdx[x] = n
		}
	}
	if ok {
		d.Vals[i] = v
		return
	}
	if len(d.Keys) == cap(d.Keys) {
		// double: append's growth of large slices copies five times over
		c := max(2*cap(d.Keys), 4)
		d.Keys = append(make([]any, 0, c), d.Keys...)
		d.Vals = append(make([]any, 0, c), d.Vals...)
	}
	d.Keys = append(d.Keys, k)
	d.Vals = append(d.Vals, v)
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
		return fmt.Sprint(v)
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
