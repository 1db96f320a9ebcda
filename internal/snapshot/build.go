package snapshot

import (
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
			case "line":
				x.Line = d.int(v)
			case "name":
				x.Function = v.str()
			}
		}
	case *TraceEntry:
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			switch kv[i].str() {
			case "action":
				x.Action = ParseAction(v.str())
			case "addr":
				x.Addr = d.addr(v)
			case "device_free":
				x.DeviceFree = d.int(v)
			case "size":
				x.Size = d.int(v)
			case "stream":
				x.Stream = d.int(v)
			case "time_us":
				x.TimeUS = d.int(v)
				d.snap.HasTimes = true
			case "frames":
				x.Stack = d.stackOf(v)
			case "compile_context":
				x.Context = d.context(v.str(), x.Context.userMetadata())
			case "user_metadata":
				x.Context = d.context(x.Context.compileContext(), v.str())
			}
		}
	case *Segment:
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			switch kv[i].str() {
			case "device":
				x.Device = int(d.int(v))
			case "address":
				x.Address = d.addr(v)
			case "total_size":
				x.TotalSize = d.int(v)
			case "allocated_size":
				x.AllocatedSize = d.int(v)
			case "active_size":
				x.ActiveSize = d.int(v)
			case "requested_size":
				x.RequestedSize = d.int(v)
			case "stream":
				x.Stream = d.int(v)
			case "segment_type":
				x.Large = v.str() != "small"
			case "is_expandable":
				x.Expandable = v.i != 0
			case "segment_pool_id":
				if t := v.tuple(); len(t) == 2 {
					x.Pool = [2]int64{d.int(t[0]), d.int(t[1])}
				}
			case "frames":
				x.Stack = d.stackOf(v)
			case "blocks":
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
			case "size":
				x.Size = d.int(v)
			case "requested_size":
				x.RequestedSize = d.int(v)
				x.HasRequested = true
			case "state":
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
			case "history":
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
			case "real_size":
				x.RealSize = d.int(v)
			case "frames":
				x.Stack = d.stackOf(v)
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

// stackOf returns the one *Stack of a frames list.
func (d *decoder) stackOf(v val) *Stack {
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

// maxDevices bounds the device numbers a file may name: every device up to
// the highest is a row of the summary.
const maxDevices = 1024

// build fills the snapshot from the pickle's root value.
func (d *decoder) build(root val) error {
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
		s.Schema = Schema113
		return segs(root)
	case kDict:
	default:
		return d.errf("the pickle holds a %s, not a snapshot's dict of segments", root.kindName())
	}
	db := root.dict()
	d.seal(&root)
	var sawSegments bool
	s.Schema = Schema20
	for i := 0; i+1 < len(db.kv); i += 2 {
		p := struct {
			k string
			v val
		}{db.kv[i].str(), db.kv[i+1]}
		switch p.k {
		case "segments":
			sawSegments = true
			if err := segs(p.v); err != nil {
				return err
			}
		case "device_traces":
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
			if sd := p.v.dict(); sd != nil {
				for j := 0; j+1 < len(sd.kv); j += 2 {
					s.AllocatorSettings = append(s.AllocatorSettings, Setting{key(sd.kv[j]), render(sd.kv[j+1], 0)})
				}
			}
		case "external_annotations":
			if l := p.v.list(); l != nil {
				s.ExternalAnnotations = l.n
			}
		case "user_metadata":
			s.UserMetadata = render(p.v, 0)
		}
	}
	if d.shared != "" {
		return d.errf("one list is %s: not a memory snapshot", d.shared)
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
