package joblog

import (
	"io"
	"strings"
	"sync"
)

// Tail keeps the end of the output from both streams, in arrival order,
// for the post-mortem. Add only copies bytes (it runs on the hot path);
// Lines splits them when the post-mortem asks.
type Tail struct {
	mu     sync.Mutex
	chunks []tailChunk
	size   int
	max    int
	// free holds the buffers of dropped chunks for the next ones: a burst
	// of output reuses them instead of allocating (and collecting) one per
	// chunk.
	free [][]byte
}

type tailChunk struct {
	stream byte
	data   []byte
}

const (
	maxLine   = 4096    // longer lines are cut in Lines
	tailBytes = 1 << 20 // raw bytes kept across both streams
)

// NewTail keeps the last n lines.
func NewTail(n int) *Tail { return &Tail{max: n} }

// Add feeds a chunk of stream s.
func (t *Tail) Add(s byte, chunk []byte) {
	if len(chunk) > tailBytes {
		chunk = chunk[len(chunk)-tailBytes:]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var b []byte
	for i, f := range t.free {
		if cap(f) >= len(chunk) {
			b = f[:0]
			t.free = append(t.free[:i], t.free[i+1:]...)
			break
		}
	}
	t.chunks = append(t.chunks, tailChunk{s, append(b, chunk...)})
	t.size += len(chunk)
	for len(t.chunks) > 1 && t.size-len(t.chunks[0].data) >= tailBytes {
		t.size -= len(t.chunks[0].data)
		if len(t.free) < 4 {
			t.free = append(t.free, t.chunks[0].data)
		}
		t.chunks[0] = tailChunk{}
		t.chunks = t.chunks[1:]
	}
}

// Lines returns the last lines (unterminated ones included); a carriage
// return ends a line too, so progress bars do not merge into one.
func (t *Tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []string
	partial := map[byte]*strings.Builder{}
	for _, c := range t.chunks {
		b := partial[c.stream]
		if b == nil {
			b = &strings.Builder{}
			partial[c.stream] = b
		}
		for _, ch := range c.data {
			if ch == '\n' || ch == '\r' {
				if b.Len() > 0 || ch == '\n' {
					lines = append(lines, b.String())
				}
				b.Reset()
				continue
			}
			if b.Len() < maxLine {
				b.WriteByte(ch)
			}
		}
	}
	for _, s := range []byte{'o', 'e'} {
		if b := partial[s]; b != nil && b.Len() > 0 {
			lines = append(lines, b.String())
		}
	}
	if len(lines) > t.max {
		lines = lines[len(lines)-t.max:]
	}
	return lines
}

// Copy reads stream s from r until EOF: each chunk goes to the log first,
// then to pass (the terminal; nil for none) and the tail. A failing pass
// writer (a closed terminal) is dropped; the log keeps everything. A log
// that cannot be written (a full disk) never stops the copy: the pipe is
// drained to the end whatever happens to the log, so the job neither blocks
// nor dies of a broken pipe; the log's first error is returned at the end.
// activity is called after each chunk.
func Copy(lw *Writer, s byte, r io.Reader, pass io.Writer, tail *Tail, activity func(int)) error {
	buf := make([]byte, 1<<20)
	var logErr error
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if werr := lw.Write(s, chunk, n < len(buf)); werr != nil && logErr == nil {
				logErr = werr
			}
			if pass != nil {
				if _, perr := pass.Write(chunk); perr != nil {
					pass = nil
				}
			}
			if tail != nil {
				tail.Add(s, chunk)
			}
			if activity != nil {
				activity(n)
			}
		}
		if err != nil {
			if werr := lw.Write(s, nil, true); logErr == nil {
				logErr = werr
			}
			if err == io.EOF {
				return logErr
			}
			return err
		}
	}
}
