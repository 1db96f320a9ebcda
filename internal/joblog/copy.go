package joblog

import (
	"io"
	"strings"
	"sync"
)

// Tail keeps the last lines of output from both streams, in arrival order,
// for the post-mortem. Lines longer than maxLine are cut.
type Tail struct {
	mu      sync.Mutex
	lines   []string
	max     int
	partial map[byte]*strings.Builder
}

const maxLine = 4096

// NewTail keeps the last n lines.
func NewTail(n int) *Tail { return &Tail{max: n, partial: map[byte]*strings.Builder{}} }

// Add feeds a chunk of stream s.
func (t *Tail) Add(s byte, chunk []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.partial[s]
	if b == nil {
		b = &strings.Builder{}
		t.partial[s] = b
	}
	for _, c := range chunk {
		if c == '\n' || c == '\r' {
			if b.Len() > 0 || c == '\n' {
				t.push(b.String())
			}
			b.Reset()
			continue
		}
		if b.Len() < maxLine {
			b.WriteByte(c)
		}
	}
}

func (t *Tail) push(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > 2*t.max {
		t.lines = append(t.lines[:0], t.lines[len(t.lines)-t.max:]...)
	}
}

// Lines returns the kept lines, including unterminated ones.
func (t *Tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	for _, s := range []byte{'o', 'e'} {
		if b := t.partial[s]; b != nil && b.Len() > 0 {
			out = append(out, b.String())
		}
	}
	if len(out) > t.max {
		out = out[len(out)-t.max:]
	}
	return out
}

// Copy reads stream s from r until EOF: each chunk goes to the log first,
// then to pass (the terminal; nil for none) and the tail. A failing pass
// writer (a closed terminal) is dropped; the log keeps everything. activity
// is called after each chunk.
func Copy(lw *Writer, s byte, r io.Reader, pass io.Writer, tail *Tail, activity func(int)) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if werr := lw.Write(s, chunk, n < len(buf)); werr != nil {
				return werr
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
			if err == io.EOF {
				return lw.Write(s, nil, true)
			}
			return err
		}
	}
}
