package joblog

import (
	"io"
	"os"
	"strings"
)

const (
	maxLine   = 4096    // longer lines are cut in Tail
	tailBytes = 1 << 20 // raw output bytes Tail reads back, across both streams
)

// tailBuf keeps the end of output not in the log (dropped while the disk
// was full), in arrival order, up to tailBytes.
type tailBuf struct {
	chunks []tailChunk
	size   int
}

type tailChunk struct {
	stream byte
	data   []byte
}

func (t *tailBuf) add(s byte, chunk []byte) {
	if len(chunk) > tailBytes {
		chunk = chunk[len(chunk)-tailBytes:]
	}
	t.chunks = append(t.chunks, tailChunk{s, append([]byte(nil), chunk...)})
	t.size += len(chunk)
	for len(t.chunks) > 1 && t.size-len(t.chunks[0].data) >= tailBytes {
		t.size -= len(t.chunks[0].data)
		t.chunks[0] = tailChunk{}
		t.chunks = t.chunks[1:]
	}
}

func (t *tailBuf) reset() { *t = tailBuf{} }

// Tail returns the last max lines of the job's output from both streams, in
// arrival order, for the post-mortem: it writes what is buffered and reads
// the end of the log back (about the last MiB), so the copier never keeps a
// second copy of the output; output the log could not hold (a full disk) is
// kept in memory while logging is stopped and comes last. Unterminated
// lines are included, a carriage return ends a line too (so progress bars
// do not merge into one), and lines are cut at 4 KiB.
func (lw *Writer) Tail(max int) []string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !lw.stopped && !lw.closed {
		lw.flush(lw.now())
	}
	var chunks []tailChunk
	if len(lw.marks) > 0 && lw.marks[0] < lw.good {
		chunks = lw.readBack(lw.marks[0], lw.good)
	}
	if lw.stopped {
		chunks = append(chunks, lw.dropped.chunks...)
	}
	return tailLines(chunks, max)
}

// readBack reads the records between two offsets of the log, nil if it
// cannot (the file is gone).
func (lw *Writer) readBack(from, to int64) []tailChunk {
	f, err := os.Open(lw.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, to-from)
	n, _ := f.ReadAt(b, from)
	b = b[:n]
	var chunks []tailChunk
	for len(b) > 0 {
		rec, k, err := parseRecord(b)
		if err != nil {
			break
		}
		b = b[k:]
		if rec.Stream == 'v' {
			continue
		}
		data := rec.Data
		if !rec.Chunk && !rec.Partial {
			data = append(data[:len(data):len(data)], '\n')
		}
		chunks = append(chunks, tailChunk{rec.Stream, data})
	}
	return chunks
}

// tailLines splits chunks into lines, each stream's unfinished line kept
// apart from the other's, and returns the last max.
func tailLines(chunks []tailChunk, max int) []string {
	size := 0
	for _, c := range chunks {
		size += len(c.data)
	}
	// Only the last tailBytes count, as when the tail was kept in memory.
	for len(chunks) > 1 && size-len(chunks[0].data) >= tailBytes {
		size -= len(chunks[0].data)
		chunks = chunks[1:]
	}
	var lines []string
	partial := map[byte]*strings.Builder{}
	for _, c := range chunks {
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
	if len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	return lines
}

// Copy reads stream s from r until EOF: each chunk goes to the log first,
// then to pass (the terminal; nil for none). A failing pass writer (a
// closed terminal) is dropped; the log keeps everything. A log that cannot
// be written (a full disk) never stops the copy: the pipe is drained to the
// end whatever happens to the log, so the job neither blocks nor dies of a
// broken pipe; the log's first error is returned at the end. activity is
// called after each chunk.
func Copy(lw *Writer, s byte, r io.Reader, pass io.Writer, activity func(int)) error {
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
