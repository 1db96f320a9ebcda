package snapshot

import (
	"bufio"
	"encoding/json"
	"io"
	"strconv"
)

// WriteJSON writes s in its own schema as JSON, the keys in the order torch
// writes them: what json.load gives is the dict pickle.load gives of the
// original (torch's _memory_viz reads either the same way), less what the
// model does not keep: unknown keys, external_annotations' entries, and
// allocator_settings' types (each is written as its text). JSON has no shared objects, so each
// stack is written out where it is used; the encoding of each *Stack is
// made once.
func WriteJSON(w io.Writer, s *Snapshot) error {
	e := &exporter{w: bufio.NewWriterSize(w, 1<<20), stacks: map[*Stack][]byte{}}
	old := s.Schema == Schema113 || s.Schema == Schema20
	if s.Schema == Schema113 {
		e.segments(s, old)
		return e.flush()
	}
	e.raw(`{"segments": `)
	e.segments(s, old)
	e.raw(`, "device_traces": [`)
	for i, tr := range s.Traces {
		if i > 0 {
			e.raw(", ")
		}
		e.raw("[")
		for j, t := range tr {
			if j > 0 {
				e.raw(", ")
			}
			e.raw(`{"action": `)
			e.str(t.Action.String())
			if t.Action == ActionOOM {
				e.raw(`, "device_free": `)
				e.int(t.DeviceFree)
			} else {
				e.raw(`, "addr": `)
				e.uint(t.Addr)
			}
			e.raw(`, "size": `)
			e.int(t.Size)
			e.raw(`, "stream": `)
			e.int(t.Stream)
			if s.HasTimes {
				e.raw(`, "time_us": `)
				e.int(t.TimeUS)
			}
			if t.Context != nil {
				e.raw(`, "compile_context": `)
				e.str(t.Context.CompileContext)
				e.raw(`, "user_metadata": `)
				e.str(t.Context.UserMetadata)
			}
			if t.Stack != nil {
				e.raw(`, "frames": `)
				e.stack(t.Stack)
			}
			e.raw("}")
		}
		e.raw("]")
	}
	e.raw("]")
	if s.Schema == Schema23 {
		e.raw(`, "allocator_settings": {`)
		for i, kv := range s.AllocatorSettings {
			if i > 0 {
				e.raw(", ")
			}
			e.str(kv.Key)
			e.raw(": ")
			e.str(kv.Value)
		}
		e.raw("}")
	}
	if s.UserMetadata != "" {
		e.raw(`, "user_metadata": `)
		e.str(s.UserMetadata)
	}
	e.raw("}\n")
	return e.flush()
}

type exporter struct {
	w      *bufio.Writer
	err    error
	stacks map[*Stack][]byte
	num    []byte
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

func (e *exporter) flush() error {
	if e.err != nil {
		return e.err
	}
	return e.w.Flush()
}

func (e *exporter) stack(st *Stack) {
	b, ok := e.stacks[st]
	if !ok {
		b = append(b, '[')
		for i, f := range st.Frames() {
			if i > 0 {
				b = append(b, ", "...)
			}
			name, _ := json.Marshal(f.Function)
			file, _ := json.Marshal(f.File)
			b = append(b, `{"name": `...)
			b = append(b, name...)
			b = append(b, `, "filename": `...)
			b = append(b, file...)
			b = append(b, `, "line": `...)
			b = strconv.AppendInt(b, f.Line, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
		e.stacks[st] = b
	}
	e.bytes(b)
}

func (e *exporter) segments(s *Snapshot, old bool) {
	e.raw("[")
	for i, seg := range s.Segments {
		if i > 0 {
			e.raw(", ")
		}
		e.raw(`{"device": `)
		e.int(int64(seg.Device))
		e.raw(`, "address": `)
		e.uint(seg.Address)
		e.raw(`, "total_size": `)
		e.int(seg.TotalSize)
		e.raw(`, "allocated_size": `)
		e.int(seg.AllocatedSize)
		e.raw(`, "active_size": `)
		e.int(seg.ActiveSize)
		if !old {
			e.raw(`, "requested_size": `)
			e.int(seg.RequestedSize)
		}
		e.raw(`, "stream": `)
		e.int(seg.Stream)
		if seg.Large {
			e.raw(`, "segment_type": "large"`)
		} else {
			e.raw(`, "segment_type": "small"`)
		}
		if !old {
			e.raw(`, "segment_pool_id": [`)
			e.int(seg.Pool[0])
			e.raw(", ")
			e.int(seg.Pool[1])
			e.raw(`], "is_expandable": `)
			e.bool(seg.Expandable)
			if seg.Stack != nil {
				e.raw(`, "frames": `)
				e.stack(seg.Stack)
			}
		}
		e.raw(`, "blocks": [`)
		for j := range seg.Blocks {
			b := &seg.Blocks[j]
			if j > 0 {
				e.raw(", ")
			}
			if old {
				e.raw(`{"size": `)
				e.int(b.Size)
				e.raw(`, "state": `)
				e.str(b.State.String())
				if len(b.History) > 0 {
					e.raw(`, "history": [`)
					for k, h := range b.History {
						if k > 0 {
							e.raw(", ")
						}
						e.raw(`{"addr": `)
						e.uint(h.Addr)
						e.raw(`, "real_size": `)
						e.int(h.RealSize)
						if h.Stack != nil {
							e.raw(`, "frames": `)
							e.stack(h.Stack)
						}
						e.raw("}")
					}
					e.raw("]")
				}
				e.raw("}")
				continue
			}
			e.raw(`{"address": `)
			e.uint(b.Address)
			e.raw(`, "size": `)
			e.int(b.Size)
			e.raw(`, "requested_size": `)
			e.int(b.RequestedSize)
			e.raw(`, "state": `)
			e.str(b.State.String())
			if b.Stack != nil {
				e.raw(`, "frames": `)
				e.stack(b.Stack)
			}
			e.raw("}")
		}
		e.raw("]}")
	}
	e.raw("]")
}
