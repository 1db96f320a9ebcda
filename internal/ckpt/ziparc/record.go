// Reading a record's content as torch's reader does: stored or inflated forward within
// the archive's inflate budget, whole when small, or checked against its CRC-32.

package ziparc

import (
	"compress/flate"
	"fmt"
	"hash/crc32"
	"io"
	"sync/atomic"
)

// DataOffset returns where torch's reader takes e's data from, or why it
// cannot read e.
func (a *Archive) DataOffset(e *Entry) (int64, error) {
	if e.ReadErr != nil {
		return 0, e.ReadErr
	}
	if e.DataOff < 0 {
		return 0, fmt.Errorf("local header of %q missing at offset %d", e.Name, e.HeaderOffset)
	}
	return e.DataOff, nil
}

// Encrypted reports whether e is encrypted (a password-protected zip):
// torch's reader refuses such a record, and nothing of it can be read
// without the password.
func (e *Entry) Encrypted() bool {
	return e.Flags&(flagEncrypted|flagStrongCrypt) != 0
}

// Open returns e's content as torch's reader sees it (Size bytes), as a
// reader that reads forward: ReadAt may not go back before an offset it has
// already read past by more than the last read's length. Deflated records
// are inflated as they are read, counted against the archive's inflate
// budget, and never held whole in memory.
func (a *Archive) Open(e *Entry) (*Record, error) {
	off, err := a.DataOffset(e)
	if err != nil {
		return nil, err
	}
	if e.Flags&(flagEncrypted|flagStrongCrypt|flagPatch) != 0 {
		return nil, fmt.Errorf("record %q is encrypted", e.Name)
	}
	if e.Size > 1<<62 {
		return nil, fmt.Errorf("record %q claims %d bytes", e.Name, e.Size)
	}
	rec := &Record{a: a, e: e, size: int64(e.Size)}
	switch e.Method {
	case 0:
		rec.stored = io.NewSectionReader(a.r, off, int64(e.Size))
	case 8:
		rec.fr = flate.NewReader(io.NewSectionReader(a.r, off, int64(e.CompSize)))
	default:
		return nil, fmt.Errorf("record %q uses unsupported compression method %d", e.Name, e.Method)
	}
	return rec, nil
}

// Record is the content of one record, read forward.
type Record struct {
	a      *Archive
	e      *Entry
	size   int64
	stored *io.SectionReader
	fr     io.ReadCloser
	base   int64  // offset of win[0]
	win    []byte // inflated bytes from base on
	done   bool   // the inflater reached its end
	err    error
}

// Size is the record's length as the central directory gives it.
func (r *Record) Size() int64 { return r.size }

// ReadAt implements io.ReaderAt for forward reads.
func (r *Record) ReadAt(p []byte, off int64) (int, error) {
	if r.stored != nil {
		return r.stored.ReadAt(p, off)
	}
	if off < r.base {
		return 0, fmt.Errorf("record %q: read at %d after %d (reads must go forward)", r.e.Name, off, r.base)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := off + int64(len(p))
	if want > r.size {
		want = r.size
	}
	// Drop what lies before off.
	if drop := off - r.base; drop > 0 {
		if drop >= int64(len(r.win)) {
			r.base += int64(len(r.win))
			r.win = r.win[:0]
		} else {
			n := copy(r.win, r.win[drop:])
			r.win = r.win[:n]
			r.base = off
		}
	}
	for r.base+int64(len(r.win)) < want && r.err == nil {
		chunk := int64(64 << 10)
		if have := r.base + int64(len(r.win)); have < off {
			// skipping forward: inflate into the window and drop it
			r.base, r.win = have, r.win[:0]
			if off-have < chunk {
				chunk = off - have
			}
		} else if need := want - have; need > chunk {
			chunk = need
		}
		if have := r.base + int64(len(r.win)); chunk > r.size-have {
			chunk = r.size - have // never inflate past the record's size
		}
		if left := r.a.budget - r.a.inflated; chunk > left {
			chunk = left
		}
		if chunk <= 0 {
			r.err = fmt.Errorf("record %q: %w (%d bytes inflated from this archive)", r.e.Name, ErrInflateBudget, r.a.inflated)
			break
		}
		l := len(r.win)
		if int64(cap(r.win)-l) < chunk {
			nw := make([]byte, l, int64(l)+chunk)
			copy(nw, r.win)
			r.win = nw
		}
		k, err := io.ReadFull(r.fr, r.win[l:int64(l)+chunk])
		r.win = r.win[:l+k]
		r.a.inflated += int64(k)
		totalInflated.Add(int64(k))
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			r.done = true
			r.err = fmt.Errorf("record %q inflates to %d bytes, the directory says %d", r.e.Name, r.base+int64(len(r.win)), r.size)
		} else if err != nil {
			r.err = fmt.Errorf("inflate %q: %w", r.e.Name, err)
		}
	}
	if off > r.base+int64(len(r.win)) {
		return 0, r.err
	}
	end := int64(len(r.win))
	if r.base+end > r.size {
		end = r.size - r.base
	}
	n := copy(p, r.win[off-r.base:end])
	if n < len(p) {
		if off+int64(n) >= r.size {
			return n, io.EOF
		}
		return n, r.err
	}
	return n, nil
}

// Err is why reading the record stopped short, if it did: the deflate
// stream is broken or shorter than the directory says, or the archive's
// inflate budget is spent (wraps ErrInflateBudget).
func (r *Record) Err() error { return r.err }

// Close releases the inflater.
func (r *Record) Close() error {
	if r.fr != nil {
		return r.fr.Close()
	}
	return nil
}

// ReadSmall returns the whole (decompressed) content of e when it is at most
// max bytes; it is meant for small metadata records.
func (a *Archive) ReadSmall(e *Entry, max int64) ([]byte, error) {
	if e.Size > uint64(max) {
		return nil, fmt.Errorf("record %q is %d bytes, over the %d-byte limit", e.Name, e.Size, max)
	}
	if e.Method == 0 && e.CompSize != e.Size {
		return nil, fmt.Errorf("stored record %q has size %d but %d stored bytes", e.Name, e.Size, e.CompSize)
	}
	rec, err := a.Open(e)
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	b := make([]byte, e.Size)
	n, err := rec.ReadAt(b, 0)
	if n == len(b) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", e.Name, err)
	}
	if e.Method == 8 {
		// torch's reader fails when the stream goes on past Size.
		var one [1]byte
		if more, _ := rec.fr.Read(one[:]); more > 0 {
			return nil, fmt.Errorf("record %q inflates to more than the %d bytes the directory says", e.Name, e.Size)
		}
	}
	return b, nil
}

// CheckCRC reads e's data and compares its CRC-32 with the directory's.
// progress, when not nil, is called with the number of bytes read so far.
func (a *Archive) CheckCRC(e *Entry, buf []byte, progress func(int64)) error {
	if e.Method == 0 && e.CompSize != e.Size {
		return fmt.Errorf("stored record %q has size %d but %d stored bytes", e.Name, e.Size, e.CompSize)
	}
	rec, err := a.Open(e)
	if err != nil {
		return err
	}
	defer rec.Close()
	var src io.Reader
	if rec.stored != nil {
		src = rec.stored
	} else {
		src = &budgetReader{a: a, r: io.LimitReader(rec.fr, int64(e.Size)+1), name: e.Name}
	}
	if len(buf) == 0 {
		buf = make([]byte, 1<<20)
	}
	h := crc32.NewIEEE()
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			h.Write(buf[:k])
			n += int64(k)
			if progress != nil {
				progress(int64(k))
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read %q: %w", e.Name, err)
		}
	}
	if uint64(n) != e.Size {
		return fmt.Errorf("record %q has %d bytes, directory says %d", e.Name, n, e.Size)
	}
	if h.Sum32() != e.CRC32 {
		return fmt.Errorf("record %q: CRC-32 %08x, directory says %08x", e.Name, h.Sum32(), e.CRC32)
	}
	return nil
}

type budgetReader struct {
	a    *Archive
	r    io.Reader
	name string
}

func (b *budgetReader) Read(p []byte) (int, error) {
	left := b.a.budget - b.a.inflated
	if left <= 0 {
		return 0, fmt.Errorf("%w (%d bytes inflated from this archive)", ErrInflateBudget, b.a.inflated)
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.r.Read(p)
	b.a.inflated += int64(n)
	totalInflated.Add(int64(n))
	return n, err
}

// Inflated is how many bytes reads of deflated records have inflated so far.
func (a *Archive) Inflated() int64 { return a.inflated }

// totalInflated is what every Archive of the process has inflated.
var totalInflated atomic.Int64

// TotalInflated is how many bytes reads of deflated records have inflated
// so far in this process, from every Archive: the work a scan or an inspect
// that opens its archives itself did on them, read before and after it.
func TotalInflated() int64 { return totalInflated.Load() }

// InflateBudget is how many bytes this archive's deflated records may
// inflate in all.
func (a *Archive) InflateBudget() int64 { return a.budget }
