package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// seal closes a dict as it goes into a container. torch's dicts are written
// whole before they are used, so what the memo holds from then on is final.
// A dict whose first items did not name its type (one SETITEM at a time) is
// typed here from all of them.
func (d *decoder) seal(v *val) {
	db := v.dict()
	if db == nil || db.sealed {
		return
	}
	db.sealed = true
	if db.typed == nil && len(db.kv) > 0 {
		if t := d.classify(db.kv); t != nil {
			db.typed = t
			d.retype(db)
			d.apply(t, db.kv)
			db.kv = nil
		}
	}
}

// classify names the model type a dict's keys (kv: key, value, ...) make it;
// nil for a plain dict (allocator_settings, annotations, the root).
func (d *decoder) classify(kv []val) any {
	has := func(k string) bool {
		for i := 0; i < len(kv); i += 2 {
			if kv[i].k == kStr && kv[i].str() == k {
				return true
			}
		}
		return false
	}
	switch {
	case has("filename"):
		if len(d.tab.frames) >= math.MaxInt32 {
			return nil
		}
		f := &Frame{id: int32(len(d.tab.frames))}
		d.tab.frames = append(d.tab.frames, f)
		return f
	case has("action"):
		return &TraceEntry{}
	case has("total_size"):
		return &Segment{Large: true}
	case has("state"):
		return &Block{}
	case has("real_size"):
		return &History{}
	}
	return nil
}

// apply sets the fields kv names on t. Unknown keys are ignored; missing
// ones stay zero.
func (d *decoder) apply(t any, kv []val) {
	switch x := t.(type) {
	case *Frame:
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			switch kv[i].str() {
			case "filename":
				if x.File == "" {
					d.frames++
				}
				x.File = v.str()
				x.keys |= keyFrameFilename
			case "line":
				// the C++ unwinder writes (size_t)-1 for no line
				if v.k == kUint {
					x.Line = v.i
					x.keys |= keyFrameLineUnsigned
				} else {
					x.Line = d.int(v)
				}
				x.keys |= keyFrameLine
			case "name":
				x.Function = v.str()
				x.keys |= keyFrameName
			}
		}
	case *TraceEntry:
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			switch kv[i].str() {
			case "action":
				x.Action = ParseAction(v.str())
				x.keys |= keyEntryAction
			case "addr":
				x.Addr = d.addr(v)
				x.keys |= keyEntryAddr
			case "device_free":
				x.DeviceFree = d.size(v, "an OOM entry's device_free")
				x.keys |= keyEntryDeviceFree
			case "size":
				x.Size = d.size(v, "a trace entry's size")
				x.keys |= keyEntrySize
			case "stream":
				x.Stream = d.int(v)
				x.keys |= keyEntryStream
			case "time_us":
				x.TimeUS = d.int(v)
				d.snap.HasTimes = true
				x.keys |= keyEntryTime
			case "frames":
				x.Stack = d.stackOf(v)
				x.keys |= keyEntryFrames
			case "compile_context":
				x.Context = d.context(v.str(), x.Context.userMetadata())
				x.keys |= keyEntryCompileContext
			case "user_metadata":
				x.Context = d.context(x.Context.compileContext(), v.str())
				x.keys |= keyEntryUserMetadata
			}
		}
	case *Segment:
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			switch kv[i].str() {
			case "device":
				x.Device = int(d.int(v))
				x.keys |= keySegDevice
			case "address":
				x.Address = d.addr(v)
				x.keys |= keySegAddress
			case "total_size":
				x.TotalSize = d.size(v, "a segment's total_size")
				x.keys |= keySegTotal
			case "allocated_size":
				x.AllocatedSize = d.size(v, "a segment's allocated_size")
				x.keys |= keySegAllocated
			case "active_size":
				x.ActiveSize = d.size(v, "a segment's active_size")
				x.keys |= keySegActive
			case "requested_size":
				x.RequestedSize = d.size(v, "a segment's requested_size")
				x.keys |= keySegRequested
			case "stream":
				x.Stream = d.int(v)
				x.keys |= keySegStream
			case "segment_type":
				x.Large = v.str() != "small"
				x.keys |= keySegType
			case "is_expandable":
				x.Expandable = v.i != 0
				x.keys |= keySegExpandable
			case "segment_pool_id":
				t := v.tuple()
				if l := v.list(); l != nil && !l.frames && len(l.items) == 2 {
					t = l.items
				}
				if len(t) == 2 {
					x.Pool = [2]int64{d.int(t[0]), d.int(t[1])}
				}
				x.keys |= keySegPool
			case "frames":
				x.Stack = d.stackOf(v)
				x.keys |= keySegFrames
			case "blocks":
				x.keys |= keySegBlocks
				if l := v.list(); l != nil && d.claim(l, "the blocks of two segments") {
					x.Blocks = make([]Block, 0, len(l.items))
					for _, it := range l.items {
						if b, ok := typed[*Block](it); ok {
							x.Blocks = append(x.Blocks, *b)
						}
					}
				}
			}
		}
	case *Block:
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			switch kv[i].str() {
			case "address":
				x.Address = d.addr(v)
				d.blockAddrs = true
				x.keys |= keyBlockAddress
			case "size":
				x.Size = d.size(v, "a block's size")
				x.keys |= keyBlockSize
			case "requested_size":
				x.RequestedSize = d.size(v, "a block's requested_size")
				x.HasRequested = true
				x.keys |= keyBlockRequested
			case "state":
				x.keys |= keyBlockState
				switch v.str() {
				case "active_allocated":
					x.State = ActiveAllocated
				case "active_pending_free":
					x.State = ActivePendingFree
				default:
					x.State = Inactive
				}
			case "frames":
				x.Stack = d.stackOf(v)
				x.keys |= keyBlockFrames
			case "history":
				x.keys |= keyBlockHistory
				if l := v.list(); l != nil && d.claim(l, "the history of two blocks") {
					for _, it := range l.items {
						if h, ok := typed[*History](it); ok {
							x.History = append(x.History, *h)
						}
					}
				}
			}
		}
	case *History:
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			switch kv[i].str() {
			case "addr":
				x.Addr = d.addr(v)
				x.keys |= keyHistAddr
			case "real_size":
				x.RealSize = d.size(v, "an allocation's real_size")
				x.keys |= keyHistRealSize
			case "frames":
				x.Stack = d.stackOf(v)
				x.keys |= keyHistFrames
			}
		}
	}
}

func typed[T any](v val) (T, bool) {
	var zero T
	if v.k == kTyped {
		var t any
		switch v.i {
		case tagFrame:
			t = (*Frame)(v.p)
		case tagEntry:
			t = (*TraceEntry)(v.p)
		case tagBlock:
			t = (*Block)(v.p)
		case tagSegment:
			t = (*Segment)(v.p)
		case tagHistory:
			t = (*History)(v.p)
		}
		x, ok := t.(T)
		return x, ok
	}
	db := v.dict()
	if db == nil {
		return zero, false
	}
	t, ok := db.typed.(T)
	return t, ok
}

// int reads an integer field; a value that does not fit int64 saturates
// (and was counted in Saturated when it was read, or is counted here).
func (d *decoder) int(v val) int64 {
	switch v.k {
	case kInt, kBig, kBool:
		return v.i
	case kUint:
		d.snap.Saturated++
		return math.MaxInt64
	case kFloat:
		return int64(math.Float64frombits(uint64(v.i)))
	}
	return 0
}

// size reads a size: what does not fit int64 saturates as int does; a
// negative size is refused (Snapshot.bad, returned when the root is built),
// for a size is never negative and every sum assumes so.
func (d *decoder) size(v val, what string) int64 {
	n := d.int(v)
	if n < 0 {
		if d.snap.bad == nil {
			d.snap.bad = d.errf("%s is %d: sizes are never negative", what, n)
		}
		return 0
	}
	return n
}

// addr reads an address: size_t in the allocator, written by Python as an
// unsigned int and by the C++ writer as its int64 bit pattern.
func (d *decoder) addr(v val) uint64 {
	switch v.k {
	case kInt, kUint:
		return uint64(v.i)
	case kBig:
		if v.i < 0 {
			return 0
		}
		return math.MaxUint64
	}
	return 0
}

// stackOf returns the one *Stack of a frames list, or of a reference into
// the shared-stack form's table ({"vramguard_stack": N}).
func (d *decoder) stackOf(v val) *Stack {
	if db := v.dict(); db != nil && db.typed == nil && len(db.kv) == 2 && db.kv[0].str() == stackRefKey && db.kv[1].k == kInt {
		return d.stackRef(db.kv[1].i)
	}
	l := v.list()
	if l == nil || (!l.frames && l.n > 0) {
		return nil
	}
	if !l.frames {
		l.frames = true // the empty list
	}
	if l.st.Len() > 0 && !l.counted {
		l.counted = true
		d.stacks++
	}
	return &l.st
}

// The compact JSON form (WriteJSON, when stacks written out where they
// are used would be too large): the root's frameTableKey holds each
// distinct frame once, stackTableKey each distinct stack as the indices of
// its frames there, and a record's "frames" is {stackRefKey: its stack's
// index}.
const (
	frameTableKey = "vramguard_frames"
	stackTableKey = "vramguard_stacks"
	stackRefKey   = "vramguard_stack"
)

// stackRef is the one *Stack every reference to stack i shares, filled
// when the root's tables are read.
func (d *decoder) stackRef(i int64) *Stack {
	if i < 0 {
		return nil
	}
	s := d.snap
	if s.stackRefs == nil {
		s.stackRefs = map[int64]*Stack{}
	}
	st := s.stackRefs[i]
	if st == nil {
		st = &Stack{}
		s.stackRefs[i] = st
	}
	return st
}

// fillStackRefs resolves the references to the tables' stacks; frames and
// stacks are the root's tables (zero values when absent).
func (d *decoder) fillStackRefs(frames, stacks val) error {
	if len(d.snap.stackRefs) == 0 {
		return nil
	}
	fl, sl := frames.list(), stacks.list()
	if fl == nil || sl == nil || (!fl.frames && fl.n > 0) {
		return d.errf("frames refer to %q, and the file has no %q of frames and %q of stacks", stackRefKey, frameTableKey, stackTableKey)
	}
	ids := fl.st.ids
	for i, st := range d.snap.stackRefs {
		if i >= int64(len(sl.items)) {
			return d.errf("frames refer to stack %d, past the end of %q", i, stackTableKey)
		}
		// JSON's two-int lists read as tuples
		items := sl.items[i].tuple()
		if l := sl.items[i].list(); l != nil && (!l.frames || l.n == 0) {
			items = l.items
		} else if sl.items[i].k != kTuple {
			return d.errf("stack %d of %q is not a list of frame indices", i, stackTableKey)
		}
		st.ids = make([]int32, len(items))
		st.tab = d.tab
		for k, it := range items {
			if it.k != kInt || it.i < 0 || it.i >= int64(len(ids)) {
				return d.errf("stack %d of %q names a frame %q does not hold", i, stackTableKey, frameTableKey)
			}
			st.ids[k] = ids[it.i]
		}
		if st.Len() > 0 {
			d.stacks++
		}
	}
	return nil
}

// maxDevices bounds the device numbers a file may name: every device up to
// the highest is a row of the summary.
const maxDevices = 1024

// build fills the snapshot from the pickle's root value.
func (d *decoder) build(root val) error {
	if err := d.build1(root); err != nil {
		return err
	}
	return d.snap.bad
}

func (d *decoder) build1(root val) error {
	s := d.snap
	segs := func(v val) error {
		l := v.list()
		if l == nil {
			return d.errf("\"segments\" is a %s, not a list", v.kindName())
		}
		for _, it := range l.items {
			d.seal(&it)
			seg, ok := typed[*Segment](it)
			if !ok {
				return d.errf("an item of \"segments\" is not a segment (a %s)", it.kindName())
			}
			if seg.Device < 0 || seg.Device >= maxDevices {
				return d.errf("a segment on device %d (devices are 0 to %d)", seg.Device, maxDevices-1)
			}
			s.Segments = append(s.Segments, seg)
		}
		return nil
	}
	switch root.k {
	case kList:
		// torch.cuda.memory_snapshot(): the segments alone, in 1.13's
		// layout or, with block addresses, 2.1's
		s.rootKeys = keyRootList
		if err := segs(root); err != nil {
			return err
		}
		s.Schema = Schema113
		if d.blockAddrs {
			s.Schema = Schema21
		}
		return d.fillStackRefs(val{}, val{})
	case kDict:
	default:
		return d.errf("the pickle holds a %s, not a snapshot's dict of segments", root.kindName())
	}
	db := root.dict()
	d.seal(&root)
	var sawSegments bool
	var frameTable, stackTable val
	budget := maxKept
	s.Schema = Schema20
	for i := 0; i+1 < len(db.kv); i += 2 {
		p := struct {
			k string
			v val
		}{db.kv[i].str(), db.kv[i+1]}
		switch p.k {
		case "segments":
			sawSegments = true
			s.rootKeys |= keyRootSegments
			if err := segs(p.v); err != nil {
				return err
			}
		case frameTableKey:
			frameTable = p.v
		case stackTableKey:
			stackTable = p.v
		case "device_traces":
			s.rootKeys |= keyRootTraces
			l := p.v.list()
			if l == nil {
				return d.errf("\"device_traces\" is a %s, not a list", p.v.kindName())
			}
			for _, dev := range l.items {
				dl := dev.list()
				if dl == nil {
					return d.errf("a device's trace is a %s, not a list", dev.kindName())
				}
				tr := make([]*TraceEntry, 0, len(dl.items))
				for _, it := range dl.items {
					if e, ok := typed[*TraceEntry](it); ok {
						tr = append(tr, e)
					}
				}
				dl.items = nil
				s.Traces = append(s.Traces, tr)
				if len(s.Traces) > maxDevices {
					return d.errf("traces for more than %d devices", maxDevices)
				}
			}
		case "allocator_settings":
			s.Schema = Schema23
			s.rootKeys |= keyRootSettings
			s.settingsJSON = d.keep(p.k, p.v, &budget)
			if sd := p.v.dict(); sd != nil {
				for j := 0; j+1 < len(sd.kv); j += 2 {
					s.AllocatorSettings = append(s.AllocatorSettings, Setting{key(sd.kv[j]), render(sd.kv[j+1], 0)})
				}
			}
		case "external_annotations":
			s.rootKeys |= keyRootAnnotations
			s.annotationsJSON = d.keep(p.k, p.v, &budget)
			if l := p.v.list(); l != nil {
				s.ExternalAnnotations = l.n
			}
		case "user_metadata":
			s.rootKeys |= keyRootUserMetadata
			s.metaJSON = d.keep(p.k, p.v, &budget)
			s.UserMetadata = render(p.v, 0)
		}
	}
	if d.shared != "" {
		return d.errf("one list is %s: not a memory snapshot", d.shared)
	}
	if err := d.fillStackRefs(frameTable, stackTable); err != nil {
		return err
	}
	if !sawSegments {
		return d.errf("the pickle's dict has no \"segments\": not a memory snapshot")
	}
	if s.Schema == Schema20 {
		switch {
		case s.HasTimes:
			s.Schema = Schema22
		case d.blockAddrs:
			s.Schema = Schema21
		}
	}
	return nil
}

// maxKept bounds the JSON kept of the root's plain values
// (allocator_settings, external_annotations, user_metadata), all together:
// a file can make one value of the memo appear any number of times.
const maxKept = 64 << 20

// keep is v as JSON, for the export to write back; nil (and the key named
// in NotKept) when v holds what JSON cannot (a record, nesting past 64) or
// the JSON would take the budget past maxKept.
func (d *decoder) keep(name string, v val, budget *int) []byte {
	b, ok := appendPlain(nil, v, 0, *budget)
	if !ok || len(b) > *budget {
		d.snap.NotKept = append(d.snap.NotKept, name)
		return nil
	}
	*budget -= len(b)
	return b
}

// appendPlain appends v as JSON, as Python's json.dumps writes the value
// pickle.load gives (tuples as lists, keys as strings); false when it
// cannot, or when b would grow past limit bytes.
func appendPlain(b []byte, v val, depth int, limit int) ([]byte, bool) {
	if depth > 64 || len(b) > limit {
		return b, false
	}
	n := len(b)
	switch v.k {
	case kNone:
		return append(b, "null"...), true
	case kInt, kBig:
		return strconv.AppendInt(b, v.i, 10), true
	case kUint:
		return strconv.AppendUint(b, uint64(v.i), 10), true
	case kFloat:
		f := math.Float64frombits(uint64(v.i))
		switch {
		case math.IsNaN(f):
			return append(b, `"NaN"`...), true
		case math.IsInf(f, 1):
			return append(b, `"Infinity"`...), true
		case math.IsInf(f, -1):
			return append(b, `"-Infinity"`...), true
		}
		b = strconv.AppendFloat(b, f, 'g', -1, 64)
		if f == math.Trunc(f) && !bytes.ContainsAny(b[n:], "e.") {
			b = append(b, ".0"...)
		}
		return b, true
	case kBool:
		if v.i != 0 {
			return append(b, "true"...), true
		}
		return append(b, "false"...), true
	case kStr, kBytes:
		return appendJSONString(b, v.str()), true
	case kTuple, kList:
		items := v.tuple()
		if l := v.list(); l != nil {
			if l.frames && l.n > 0 {
				return b, false
			}
			items = l.items
		}
		b = append(b, '[')
		for i, it := range items {
			if i > 0 {
				b = append(b, ", "...)
			}
			var ok bool
			if b, ok = appendPlain(b, it, depth+1, limit); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case kDict:
		db := v.dict()
		if db.typed != nil {
			return b, false
		}
		b = append(b, '{')
		for i := 0; i+1 < len(db.kv); i += 2 {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendJSONString(b, key(db.kv[i]))
			b = append(b, ": "...)
			var ok bool
			if b, ok = appendPlain(b, db.kv[i+1], depth+1, limit); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

func appendJSONString(b []byte, s string) []byte {
	j, _ := json.Marshal(s)
	return append(b, j...)
}

// render writes a plain value as Python would print it, for settings; what
// is nested deeper than a few levels (a container may hold itself) is "...".
func render(v val, depth int) string {
	if depth > 8 {
		return "..."
	}
	switch v.k {
	case kNone:
		return "None"
	case kInt, kBig:
		return strconv.FormatInt(v.i, 10)
	case kUint:
		return strconv.FormatUint(uint64(v.i), 10)
	case kFloat:
		return strconv.FormatFloat(math.Float64frombits(uint64(v.i)), 'g', -1, 64)
	case kBool:
		if v.i != 0 {
			return "True"
		}
		return "False"
	case kStr, kBytes:
		return v.str()
	case kDict:
		db := v.dict()
		out := "{"
		for i := 0; i+1 < len(db.kv); i += 2 {
			if i > 0 {
				out += ", "
			}
			out += fmt.Sprintf("%s: %s", key(db.kv[i]), render(db.kv[i+1], depth+1))
		}
		return out + "}"
	case kList:
		return fmt.Sprintf("[%d items]", v.list().n)
	case kTuple:
		t := v.tuple()
		out := "("
		for i, x := range t {
			if i > 0 {
				out += ", "
			}
			out += render(x, depth+1)
		}
		return out + ")"
	}
	return "?"
}

// context interns a trace entry's compile_context and user_metadata: they
// repeat across entries, so entries share one TraceContext per pair.
func (d *decoder) context(cc, um string) *TraceContext {
	if cc == "" && um == "" {
		return nil
	}
	if c := d.lastContext; c != nil && c.CompileContext == cc && c.UserMetadata == um {
		return c
	}
	k := TraceContext{cc, um}
	if c, ok := d.contexts[k]; ok {
		d.lastContext = c
		return c
	}
	c := &k
	d.contexts[k] = c
	d.lastContext = c
	return c
}
