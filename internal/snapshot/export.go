package snapshot

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"strconv"
)

// WriteJSON writes s in its own schema as JSON: every record with the keys
// the file gave it and no other, in torch's order, so that json.load of the
// export equals pickle.load of the original (tuples as lists, as JSON has
// them), and torch's _memory_viz reads either the same way.
// allocator_settings, external_annotations and user_metadata are written
// back as they were read, unless NotKept names them.
//
// JSON has no shared objects, so in torch's form each stack is written out
// where it is used. When that would make the file very much larger than
// the snapshot (Compact), the export writes the compact form instead:
// the root's "vramguard_frames" holds each distinct frame once,
// "vramguard_stacks" each distinct stack once as a list of indices into
// the frames, and a record's "frames" is {"vramguard_stack": N}, its
// stack's index. vramguard reads that form back as the same snapshot;
// torch does not.
func WriteJSON(w io.Writer, s *Snapshot) error {
	return writeJSON(w, s, s.Compact())
}

func writeJSON(w io.Writer, s *Snapshot, compact bool) error {
	e := &exporter{w: bufio.NewWriterSize(w, 1<<20), stacks: map[*Stack][]byte{}}
	if compact {
		e.plan = planCompact(s)
	}
	if s.rootKeys&keyRootList != 0 && e.plan == nil {
		e.segments(s)
		e.raw("\n")
		return e.flush()
	}
	e.raw("{")
	sep := ""
	key := func(k string) {
		e.raw(sep)
		e.str(k)
		e.raw(": ")
		sep = ", "
	}
	if s.rootKeys&(keyRootSegments|keyRootList) != 0 {
		key("segments")
		e.segments(s)
	}
	if s.rootKeys&keyRootTraces != 0 {
		key("device_traces")
		e.traces(s)
	}
	for _, kv := range []struct {
		bit  keySet
		name string
		json []byte
	}{{keyRootSettings, "allocator_settings", s.settingsJSON}, {keyRootAnnotations, "external_annotations", s.annotationsJSON},
		{keyRootUserMetadata, "user_metadata", s.metaJSON}} {
		if s.rootKeys&kv.bit != 0 && kv.json != nil {
			key(kv.name)
			e.bytes(kv.json)
		}
	}
	if p := e.plan; p != nil {
		key(frameTableKey)
		e.list(len(p.frames), func(i int) { e.bytes(appendFrame(nil, p.frames[i])) })
		key(stackTableKey)
		e.list(len(p.stacks), func(i int) {
			ids := p.stacks[i]
			e.list(len(ids), func(k int) { e.int(int64(ids[k])) })
		})
	}
	e.raw("}\n")
	return e.flush()
}

// Compact is whether WriteJSON writes the compact form: when writing each
// stack out where it is used would take more than 64 MiB and more than 100
// times the compact form (a deep stack shared by many records made torch's
// form 700 times its pickle; a real snapshot's is 5 to 60 times, and 6 of
// the corpus's 22 pass 64 MiB, at 160 to 240 times the compact form).
func (s *Snapshot) Compact() bool {
	p := planCompact(s)
	return p.inline > 64<<20 && p.inline > 100*p.compact
}

// compactPlan is the compact form's tables: each distinct frame (by value)
// and stack (by its frames) once, and each stack's index.
type compactPlan struct {
	frames   []*Frame
	stacks   [][]int32
	stackIdx map[*Stack]int
	// the sizes of the two forms' stacks, roughly
	inline, compact int64
}

type frameKey struct {
	file, function string
	line           int64
	keys           keySet
}

func planCompact(s *Snapshot) *compactPlan {
	p := &compactPlan{stackIdx: map[*Stack]int{}}
	frameIdx := map[frameKey]int32{}
	byFrames := map[string]int{}
	inlineOf := map[*Stack]int64{}
	var key []byte
	s.eachStack(func(st *Stack) {
		if st == nil {
			return
		}
		p.compact += int64(len(`{"vramguard_stack": 1234567}`))
		if n, ok := inlineOf[st]; ok {
			p.inline += n
			return
		}
		ids := make([]int32, st.Len())
		key = key[:0]
		var n int64 = 2
		for i := range st.Len() {
			f := st.Frame(i)
			fk := frameKey{f.File, f.Function, f.Line, f.keys}
			id, ok := frameIdx[fk]
			if !ok {
				id = int32(len(p.frames))
				frameIdx[fk] = id
				p.frames = append(p.frames, f)
				p.compact += int64(len(f.File) + len(f.Function) + 48)
			}
			ids[i] = id
			key = binary.AppendUvarint(key, uint64(id))
			n += int64(len(f.File) + len(f.Function) + 48)
		}
		inlineOf[st] = n
		p.inline += n
		k, ok := byFrames[string(key)]
		if !ok {
			k = len(p.stacks)
			byFrames[string(key)] = k
			p.stacks = append(p.stacks, ids)
			p.compact += int64(len(ids)*8 + 2)
		}
		p.stackIdx[st] = k
	})
	return p
}

// eachStack calls f with every record's stack, in the order WriteJSON
// writes them.
func (s *Snapshot) eachStack(f func(*Stack)) {
	for _, seg := range s.Segments {
		f(seg.Stack)
		for i := range seg.Blocks {
			b := &seg.Blocks[i]
			f(b.Stack)
			for _, h := range b.History {
				f(h.Stack)
			}
		}
	}
	for _, tr := range s.Traces {
		for _, t := range tr {
			f(t.Stack)
		}
	}
}

type exporter struct {
	w      *bufio.Writer
	err    error
	stacks map[*Stack][]byte
	num    []byte
	plan   *compactPlan // the compact form's; nil in torch's
}

func (e *exporter) raw(s string) {
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

func (e *exporter) bytes(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *exporter) str(s string) {
	b, _ := json.Marshal(s)
	e.bytes(b)
}

func (e *exporter) int(v int64) {
	e.num = strconv.AppendInt(e.num[:0], v, 10)
	e.bytes(e.num)
}

func (e *exporter) uint(v uint64) {
	e.num = strconv.AppendUint(e.num[:0], v, 10)
	e.bytes(e.num)
}

func (e *exporter) bool(v bool) {
	if v {
		e.raw("true")
	} else {
		e.raw("false")
	}
}

// list writes n items as a JSON list, item(i) writing the i-th.
func (e *exporter) list(n int, item func(i int)) {
	e.raw("[")
	for i := range n {
		if i > 0 {
			e.raw(", ")
		}
		item(i)
	}
	e.raw("]")
}

func (e *exporter) flush() error {
	if e.err != nil {
		return e.err
	}
	return e.w.Flush()
}

// encode is a stack's frames as JSON, made once per stack.
func (e *exporter) encode(st *Stack) []byte {
	b, ok := e.stacks[st]
	if !ok {
		b = append(b, '[')
		if st != nil {
			for i := range st.Len() {
				if i > 0 {
					b = append(b, ", "...)
				}
				b = appendFrame(b, st.Frame(i))
			}
		}
		b = append(b, ']')
		e.stacks[st] = b
	}
	return b
}

// appendFrame appends a frame with the keys it was read with.
func appendFrame(b []byte, f *Frame) []byte {
	all := f.keys&(keyFrameName|keyFrameFilename|keyFrameLine) == 0
	b = append(b, '{')
	sep := ""
	if all || f.keys&keyFrameName != 0 {
		b = append(b, `"name": `...)
		b = appendJSONString(b, f.Function)
		sep = ", "
	}
	if all || f.keys&keyFrameFilename != 0 {
		b = append(b, sep...)
		b = append(b, `"filename": `...)
		b = appendJSONString(b, f.File)
		sep = ", "
	}
	if all || f.keys&keyFrameLine != 0 {
		b = append(b, sep...)
		b = append(b, `"line": `...)
		if f.keys&keyFrameLineUnsigned != 0 {
			b = strconv.AppendUint(b, uint64(f.Line), 10)
		} else {
			b = strconv.AppendInt(b, f.Line, 10)
		}
	}
	return append(b, '}')
}

// stack writes a record's frames: the stack, or in the compact form its
// reference.
func (e *exporter) stack(st *Stack) {
	if e.plan == nil || st == nil {
		e.bytes(e.encode(st))
		return
	}
	e.raw(`{"` + stackRefKey + `": `)
	e.int(int64(e.plan.stackIdx[st]))
	e.raw("}")
}

// rec writes a record's keys: each key present in has, in order.
type rec struct {
	e   *exporter
	has keySet
	sep bool
}

// int, uint, str, bool and stack write the field name, its value v, when
// the record has it.
func (r *rec) int(bit keySet, name string, v int64) {
	if r.key(bit, name) {
		r.e.int(v)
	}
}

func (r *rec) uint(bit keySet, name string, v uint64) {
	if r.key(bit, name) {
		r.e.uint(v)
	}
}

func (r *rec) str(bit keySet, name string, v string) {
	if r.key(bit, name) {
		r.e.str(v)
	}
}

func (r *rec) bool(bit keySet, name string, v bool) {
	if r.key(bit, name) {
		r.e.bool(v)
	}
}

func (r *rec) stack(bit keySet, name string, v *Stack) {
	if r.key(bit, name) {
		r.e.stack(v)
	}
}

// key writes the field name when the record has it (bit), and says whether
// it did.
func (r *rec) key(bit keySet, name string) bool {
	if r.has&bit == 0 {
		return false
	}
	if r.sep {
		r.e.raw(", ")
	}
	r.sep = true
	r.e.str(name)
	r.e.raw(": ")
	return true
}

func (e *exporter) traces(s *Snapshot) {
	e.list(len(s.Traces), func(i int) {
		tr := s.Traces[i]
		e.list(len(tr), func(j int) {
			t := tr[j]
			e.raw("{")
			r := rec{e: e, has: t.keys}
			r.str(keyEntryAction, "action", t.Action.String())
			r.uint(keyEntryAddr, "addr", t.Addr)
			r.int(keyEntryDeviceFree, "device_free", t.DeviceFree)
			r.int(keyEntrySize, "size", t.Size)
			r.int(keyEntryStream, "stream", t.Stream)
			r.int(keyEntryTime, "time_us", t.TimeUS)
			r.str(keyEntryCompileContext, "compile_context", t.Context.compileContext())
			r.str(keyEntryUserMetadata, "user_metadata", t.Context.userMetadata())
			r.stack(keyEntryFrames, "frames", t.Stack)
			e.raw("}")
		})
	})
}

func (e *exporter) segments(s *Snapshot) {
	e.list(len(s.Segments), func(i int) {
		seg := s.Segments[i]
		e.raw("{")
		r := rec{e: e, has: seg.keys}
		r.int(keySegDevice, "device", int64(seg.Device))
		r.uint(keySegAddress, "address", seg.Address)
		r.int(keySegTotal, "total_size", seg.TotalSize)
		r.int(keySegAllocated, "allocated_size", seg.AllocatedSize)
		r.int(keySegActive, "active_size", seg.ActiveSize)
		r.int(keySegRequested, "requested_size", seg.RequestedSize)
		r.int(keySegStream, "stream", seg.Stream)
		if r.key(keySegType, "segment_type") {
			if seg.Large {
				e.raw(`"large"`)
			} else {
				e.raw(`"small"`)
			}
		}
		if r.key(keySegPool, "segment_pool_id") {
			e.raw("[")
			e.int(seg.Pool[0])
			e.raw(", ")
			e.int(seg.Pool[1])
			e.raw("]")
		}
		r.bool(keySegExpandable, "is_expandable", seg.Expandable)
		r.stack(keySegFrames, "frames", seg.Stack)
		if r.key(keySegBlocks, "blocks") {
			e.blocks(seg.Blocks)
		}
		e.raw("}")
	})
}

func (e *exporter) blocks(blocks []Block) {
	e.list(len(blocks), func(j int) {
		b := &blocks[j]
		e.raw("{")
		r := rec{e: e, has: b.keys}
		r.uint(keyBlockAddress, "address", b.Address)
		r.int(keyBlockSize, "size", b.Size)
		r.int(keyBlockRequested, "requested_size", b.RequestedSize)
		r.str(keyBlockState, "state", b.State.String())
		r.stack(keyBlockFrames, "frames", b.Stack)
		if r.key(keyBlockHistory, "history") {
			e.list(len(b.History), func(k int) {
				h := &b.History[k]
				e.raw("{")
				hr := rec{e: e, has: h.keys}
				hr.uint(keyHistAddr, "addr", h.Addr)
				hr.int(keyHistRealSize, "real_size", h.RealSize)
				hr.stack(keyHistFrames, "frames", h.Stack)
				e.raw("}")
			})
		}
		e.raw("}")
	})
}
