// Package joblog writes and reads a job's output log: every chunk the job
// wrote, in the order it arrived, with the time it arrived and the stream it
// came from. Records keep the bytes exactly (binary, partial lines and 10 MB
// lines included), so Decode reproduces the job's output byte for byte.
//
// The writer stamps each chunk once, as it was read from the job's pipe:
//
//	2026-11-29T17:38:57.123456Z o# 27
//	epoch 1 loss 0.31
//	epoch 2
//
// is a header line (time, stream, '#', the byte count) followed by that
// many bytes of output as the job wrote them and one newline, so the log
// costs a header per read rather than per line and stays readable with
// less or grep. 'o' is stdout, 'e' stderr and 'v' vramguard's own notes.
//
// Logs written before chunk records (and vramguard's notes still) hold one
// record per line, which the reader keeps reading:
//
//	2026-11-29T17:38:57.123456Z o| text of a complete line
//	2026-11-29T17:38:57.123456Z e+ a partial chunk (no newline followed it yet)
//
// where '|' ends a line of the job's output and '+' continues into the next
// record of the same stream.
package joblog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// TimeLayout is the fixed-width record timestamp.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

const prefixLen = len(TimeLayout) + 4 // "TS sF "

// Writer appends records to a log file. It is safe for concurrent use by the
// two stream copiers.
//
// A write that fails (no space left on the device, a quota, an I/O error)
// never stops the job's output: the Writer drops what it cannot write,
// takes the file back to its last whole record, says once through the
// notify function that logging stopped, and tries again at most every
// RetryEvery. When a write succeeds again it first writes a note ('v')
// saying how many bytes of the job's output were not logged, so the log
// marks its gap.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	path string
	now  func() time.Time
	// buf holds records not yet written; pending counts the job's bytes in
	// it, good is the file's size up to the last record written whole.
	buf     []byte
	pending int64
	good    int64
	// While stopped, writes are dropped and counted in lost; a retry is due
	// RetryEvery after lastTry.
	stopped  bool
	lost     int64
	lastTry  time.Time
	why      error
	notify   func(string)
	notified bool // said that logging stopped
	resumed  bool // said that it resumed
	closed   bool
	// marks are the file offsets where this Writer's recent records start,
	// enough of them to find the last tailBytes of output (Tail).
	marks []int64
	// dropped keeps the end of what could not be logged while stopped, for
	// Tail; it is emptied when logging resumes.
	dropped tailBuf
}

// RetryEvery is how often a Writer whose writes failed tries again.
var RetryEvery = 200 * time.Millisecond

// bufSize is how much a Writer buffers before it writes.
const bufSize = 256 << 10

// Create opens path for appending records.
func Create(path string, now func() time.Time) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create log %s: %w", path, err)
	}
	if now == nil {
		now = time.Now
	}
	lw := &Writer{f: f, path: path, now: now, buf: make([]byte, 0, bufSize)}
	if st, err := f.Stat(); err == nil {
		lw.good = st.Size()
	}
	return lw, nil
}

// SetNotify sets where the Writer says, once, that logging stopped (and
// that it resumed): one line without the "vramguard: " prefix.
func (lw *Writer) SetNotify(fn func(msg string)) {
	lw.mu.Lock()
	lw.notify = fn
	lw.mu.Unlock()
}

// Lost is how many bytes of the job's output are not in the log so far.
func (lw *Writer) Lost() int64 {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.lost
}

// Write records chunk as read from stream ('o' or 'e'). flush asks for the
// buffer to reach the file now (the copier sets it when the pipe is drained).
// It fails only after Close: a chunk that cannot be written is counted as
// lost (see Writer).
func (lw *Writer) Write(stream byte, chunk []byte, flush bool) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return os.ErrClosed
	}
	now := lw.now()
	if lw.stopped {
		if now.Sub(lw.lastTry) < RetryEvery {
			lw.drop(stream, chunk)
			return nil
		}
		lw.lastTry = now
		if !lw.resume(now) {
			lw.drop(stream, chunk)
			return nil
		}
	}
	if len(chunk) > 0 {
		lw.mark()
		lw.buf = appendRecords(lw.buf, now, stream, chunk)
		lw.pending += int64(len(chunk))
	}
	if flush || len(lw.buf) >= bufSize {
		lw.flush(now)
	}
	return nil
}

// maxChunk is the most output one chunk record holds: larger writes are
// split (the copier reads 1 MiB at most), and the reader refuses a record
// that claims more than maxRecord, so a damaged log cannot make it allocate
// without bound.
const (
	maxChunk  = 4 << 20
	maxRecord = 16 << 20
)

// appendRecords appends chunk's records to rec, all with time t: chunk
// records for the job's streams, line records for vramguard's notes (a
// few short lines, kept greppable as before).
func appendRecords(rec []byte, t time.Time, stream byte, chunk []byte) []byte {
	var tsBuf [40]byte
	ts := t.UTC().AppendFormat(tsBuf[:0], TimeLayout)
	if stream != 'v' {
		for len(chunk) > 0 {
			piece := chunk
			if len(piece) > maxChunk {
				piece = piece[:maxChunk]
			}
			chunk = chunk[len(piece):]
			rec = append(rec, ts...)
			rec = append(rec, ' ', stream, '#', ' ')
			rec = strconv.AppendInt(rec, int64(len(piece)), 10)
			rec = append(rec, '\n')
			rec = append(rec, piece...)
			rec = append(rec, '\n')
		}
		return rec
	}
	return appendLineRecords(rec, ts, stream, chunk)
}

// appendLineRecords appends one record per line; a last piece without
// newline is a '+' record.
func appendLineRecords(rec, ts []byte, stream byte, chunk []byte) []byte {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		flag := byte('|')
		line := chunk
		if i >= 0 {
			line, chunk = chunk[:i], chunk[i+1:]
		} else {
			flag, chunk = '+', nil
		}
		rec = append(rec, ts...)
		rec = append(rec, ' ', stream, flag, ' ')
		rec = append(rec, line...)
		rec = append(rec, '\n')
	}
	return rec
}

// mark notes where the next record starts, and forgets marks no longer
// needed to find the last tailBytes.
func (lw *Writer) mark() {
	at := lw.good + int64(len(lw.buf))
	lw.marks = append(lw.marks, at)
	k := 0
	for k+1 < len(lw.marks) && lw.marks[k+1] <= at-tailBytes {
		k++
	}
	if k > 0 {
		lw.marks = append(lw.marks[:0], lw.marks[k:]...)
	}
}

// drop counts chunk as lost and keeps its end for Tail.
func (lw *Writer) drop(stream byte, chunk []byte) {
	lw.lost += int64(len(chunk))
	lw.dropped.add(stream, chunk)
}

// flush writes the buffer; on failure it drops it and stops.
func (lw *Writer) flush(now time.Time) {
	if len(lw.buf) == 0 {
		return
	}
	err := lw.writeOut(lw.buf)
	if err != nil {
		lw.lost += lw.pending
		lw.stop(now, err)
		lw.dropRecords(lw.buf)
	}
	lw.buf, lw.pending = lw.buf[:0], 0
}

// writeOut writes b whole or, failing, takes the file back to its last
// whole record.
func (lw *Writer) writeOut(b []byte) error {
	n, err := lw.f.Write(b)
	if err == nil {
		lw.good += int64(n)
		return nil
	}
	if n > 0 {
		lw.f.Truncate(lw.good)
	}
	return err
}

// dropRecords keeps, for Tail, the output in records that could not be
// written.
func (lw *Writer) dropRecords(b []byte) {
	for len(b) > 0 {
		rec, n, err := parseRecord(b)
		if err != nil {
			return
		}
		if rec.Stream != 'v' {
			data := rec.Data
			if !rec.Chunk && !rec.Partial {
				data = append(data[:len(data):len(data)], '\n')
			}
			lw.dropped.add(rec.Stream, data)
		}
		b = b[n:]
	}
}

func (lw *Writer) stop(now time.Time, err error) {
	lw.stopped, lw.lastTry, lw.why = true, now, err
	if lw.notify != nil && !lw.notified {
		lw.notified = true
		lw.notify(fmt.Sprintf("logging stopped: %v; the job's output still reaches the terminal, and logging resumes when there is room again", err))
	}
}

// resume writes the note that marks the gap; it reports whether logging
// goes on.
func (lw *Writer) resume(now time.Time) bool {
	note := appendRecords(nil, now, 'v', []byte(lw.gapNote()))
	if err := lw.writeOut(note); err != nil {
		return false
	}
	if lw.notify != nil && lw.notified && !lw.resumed {
		lw.resumed = true
		lw.notify(fmt.Sprintf("logging resumed in %s; %d bytes of the job's output are missing from it", lw.path, lw.lost))
	}
	lw.stopped, lw.lost = false, 0
	lw.dropped.reset()
	lw.marks = lw.marks[:0]
	return true
}

func (lw *Writer) gapNote() string {
	return fmt.Sprintf("vramguard: %d bytes of output were not logged here (%v)\n", lw.lost, lw.why)
}

// Note writes a line of vramguard's own (restart notices) as stream 'v'.
func (lw *Writer) Note(msg string) error {
	return lw.Write('v', []byte(msg+"\n"), true)
}

// Close writes what is buffered and closes the file. A log that misses
// output gets the note that says so, room permitting; the error is the
// reason output was lost, if any was.
func (lw *Writer) Close() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return os.ErrClosed
	}
	now := lw.now()
	if !lw.stopped {
		lw.flush(now)
	}
	if lw.stopped && lw.lost > 0 {
		lw.resume(now)
	}
	lw.closed = true
	err := lw.f.Close()
	if lw.stopped || lw.why != nil {
		err = fmt.Errorf("log %s misses output: %w", lw.path, lw.why)
	}
	return err
}

// Record is one decoded record.
type Record struct {
	Time   time.Time
	Stream byte // 'o', 'e' or 'v'
	// Chunk says Data is a chunk as read from the job's pipe (any number
	// of lines, the last maybe unfinished); otherwise Data is one line
	// without its newline, and Partial says no newline ended it yet.
	Chunk   bool
	Partial bool
	Data    []byte
}

// Options select what Decode writes.
type Options struct {
	// Timestamps prefixes each output line with the time its first byte
	// arrived.
	Timestamps bool
	// Streams limits output to these streams ("oe" by default; 'v' adds
	// vramguard's own notes).
	Streams string
}

// Reader decodes records from a log.
type Reader struct {
	br *bufio.Reader
}

// NewReader reads records from r.
func NewReader(r io.Reader) *Reader { return &Reader{br: bufio.NewReaderSize(r, 256<<10)} }

// ErrIncomplete is returned by Next at a record that is not yet fully written;
// a follower retries once more data arrives.
var ErrIncomplete = errors.New("incomplete record")

// Next returns the next record, io.EOF at a clean end, or ErrIncomplete
// with the bytes of a record not yet fully written (a log still being
// written); Follow handles live files.
func (r *Reader) Next() (Record, []byte, error) {
	line, err := r.br.ReadBytes('\n')
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			return Record{}, line, ErrIncomplete
		}
		return Record{}, nil, err
	}
	rec, n, err := parseHeader(line[:len(line)-1])
	if err != nil || !rec.Chunk {
		return rec, nil, err
	}
	body := make([]byte, n+1)
	if k, err := io.ReadFull(r.br, body); err != nil {
		return Record{}, append(line, body[:k]...), ErrIncomplete
	}
	if body[n] != '\n' {
		return Record{}, nil, fmt.Errorf("malformed log record %q: its %d bytes are not followed by a newline", truncate(line), n)
	}
	rec.Data = body[:n]
	return rec, nil, nil
}

// errShort says parseRecord needs more bytes.
var errShort = errors.New("short record")

// parseRecord decodes the record at the start of b and says how many bytes
// it took; errShort when b ends inside it.
func parseRecord(b []byte) (Record, int, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return Record{}, 0, errShort
	}
	rec, n, err := parseHeader(b[:i])
	if err != nil || !rec.Chunk {
		return rec, i + 1, err
	}
	body := b[i+1:]
	if len(body) < n+1 {
		return Record{}, 0, errShort
	}
	if body[n] != '\n' {
		return Record{}, 0, fmt.Errorf("malformed log record %q: its %d bytes are not followed by a newline", truncate(b[:i]), n)
	}
	rec.Data = body[:n:n]
	return rec, i + 1 + n + 1, nil
}

// parseHeader decodes a line record, or a chunk record's header line and
// the byte count that follows it.
func parseHeader(b []byte) (Record, int, error) {
	if len(b) < prefixLen || b[len(TimeLayout)] != ' ' || b[prefixLen-1] != ' ' {
		return Record{}, 0, fmt.Errorf("malformed log record %q", truncate(b))
	}
	t, err := time.Parse(TimeLayout, string(b[:len(TimeLayout)]))
	if err != nil {
		return Record{}, 0, fmt.Errorf("malformed log time: %w", err)
	}
	rec := Record{Time: t, Stream: b[len(TimeLayout)+1]}
	switch flag := b[len(TimeLayout)+2]; flag {
	case '#':
		n, err := strconv.Atoi(string(b[prefixLen:]))
		if err != nil || n < 0 || n > maxRecord {
			return Record{}, 0, fmt.Errorf("malformed log record %q: byte count not a number up to %d", truncate(b), maxRecord)
		}
		rec.Chunk = true
		return rec, n, nil
	case '|', '+':
		rec.Partial = flag == '+'
		rec.Data = b[prefixLen:]
		return rec, 0, nil
	default:
		return Record{}, 0, fmt.Errorf("malformed log record %q: unknown flag %q", truncate(b), flag)
	}
}

func truncate(b []byte) []byte {
	if len(b) > 60 {
		return b[:60]
	}
	return b
}

// Decoder turns records back into output. The two streams were read from
// two pipes, so a stdout line may arrive in pieces with a stderr line in
// between; the decoder keeps each stream's unfinished line (up to
// maxPending bytes) and writes lines whole, so merged output never splices
// one stream's line into the middle of another's. Each stream's bytes come
// out exactly as the job wrote them.
type Decoder struct {
	opts    Options
	pending map[byte]*pendingLine
}

type pendingLine struct {
	t       time.Time
	data    []byte
	started bool // part of this line was already written (over maxPending)
}

// maxPending bounds how much of an unfinished line the decoder holds.
const maxPending = 1 << 20

// NewDecoder returns a decoder with opts.
func NewDecoder(opts Options) *Decoder {
	if opts.Streams == "" {
		opts.Streams = "oe"
	}
	return &Decoder{opts: opts, pending: map[byte]*pendingLine{}}
}

// Write writes rec's bytes to w, holding back an unfinished line.
func (d *Decoder) Write(w io.Writer, rec Record) error {
	if bytes.IndexByte([]byte(d.opts.Streams), rec.Stream) < 0 {
		return nil
	}
	if rec.Chunk {
		data := rec.Data
		for len(data) > 0 {
			line := Record{Time: rec.Time, Stream: rec.Stream, Data: data}
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				line.Data, data = data[:i], data[i+1:]
			} else {
				line.Partial, data = true, nil
			}
			if err := d.write(w, line); err != nil {
				return err
			}
		}
		return nil
	}
	return d.write(w, rec)
}

func (d *Decoder) write(w io.Writer, rec Record) error {
	p := d.pending[rec.Stream]
	if p == nil {
		p = &pendingLine{}
		d.pending[rec.Stream] = p
	}
	if len(p.data) == 0 && !p.started {
		p.t = rec.Time
	}
	p.data = append(p.data, rec.Data...)
	if !rec.Partial {
		p.data = append(p.data, '\n')
		return d.emit(w, p, true)
	}
	if len(p.data) >= maxPending {
		return d.emit(w, p, false)
	}
	return nil
}

// emit writes p's bytes; done says the line ended.
func (d *Decoder) emit(w io.Writer, p *pendingLine, done bool) error {
	if d.opts.Timestamps && !p.started && len(p.data) > 0 {
		if _, err := io.WriteString(w, p.t.Local().Format("2006-01-02 15:04:05.000 ")); err != nil {
			return err
		}
	}
	if _, err := w.Write(p.data); err != nil {
		return err
	}
	p.data = p.data[:0]
	p.started = !done
	return nil
}

// Flush writes every stream's unfinished line (at the end of a log, or when
// a follower has caught up with a live one).
func (d *Decoder) Flush(w io.Writer) error {
	for _, s := range []byte("oev") {
		if p := d.pending[s]; p != nil && len(p.data) > 0 {
			if err := d.emit(w, p, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// Decode writes the output recorded in the log r to w.
func Decode(r io.Reader, w io.Writer, opts Options) error {
	rd := NewReader(r)
	dec := NewDecoder(opts)
	bw := bufio.NewWriterSize(w, 256<<10)
	defer bw.Flush()
	for {
		rec, _, err := rd.Next()
		if err == io.EOF || err == ErrIncomplete {
			if err := dec.Flush(bw); err != nil {
				return err
			}
			return bw.Flush()
		}
		if err != nil {
			return err
		}
		if err := dec.Write(bw, rec); err != nil {
			return err
		}
	}
}

// Follow writes the log at path to w as it grows, until done reports true
// and the file has been read to its end. poll is the wait between reads.
func Follow(path string, w io.Writer, opts Options, poll time.Duration, done func() bool, stop <-chan struct{}) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := NewDecoder(opts)
	var pending []byte
	buf := make([]byte, 256<<10)
	for {
		finished := done()
		n, rerr := f.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			for {
				rec, k, err := parseRecord(pending)
				if err == errShort {
					break
				}
				if err != nil {
					return err
				}
				if err := dec.Write(w, rec); err != nil {
					return err
				}
				pending = pending[k:]
			}
			if len(pending) == 0 {
				pending = nil
			}
			continue
		}
		if rerr != nil && rerr != io.EOF {
			return rerr
		}
		// Caught up: show what is there of unfinished lines (progress bars).
		if err := dec.Flush(w); err != nil {
			return err
		}
		if finished {
			return nil
		}
		select {
		case <-stop:
			return nil
		case <-time.After(poll):
		}
	}
}
