package ckpt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/vramguard/vramguard/internal/pickle"
)

// Options control how much of a checkpoint Inspect reads.
type Options struct {
	// Deep reads every byte: the CRC of every zip record, every storage of a
	// legacy file, every safetensors byte range.
	Deep bool
	// Progress, when set, is called with the number of bytes read by the
	// deep pass since the last call.
	Progress func(n int64)
	// AllErrors keeps checking after the first deep error.
	AllErrors bool
	// Structure checks each storage record's local header (a few bytes per
	// record); on by default in Inspect and Verify.
	Structure bool
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// Inspect reads a checkpoint file or directory and reports what it holds and
// whether its structure is sound. The error is non-nil only when the input
// itself cannot be read (missing, permission denied, an I/O error): a
// corrupt or unrecognised checkpoint is a Report with Valid false and a
// Reason. Inspect never executes anything from the checkpoint.
func Inspect(path string, opt Options) (*Report, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, Unreadable(err)
	}
	if st.IsDir() {
		return inspectDir(path, opt)
	}
	if !st.Mode().IsRegular() {
		// A FIFO or device would block or never end.
		return nil, &UnreadableError{fmt.Errorf("%s is not a regular file", path)}
	}
	f, size, err := openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep := &Report{Path: path, Size: size, ModTime: st.ModTime(), Valid: true}
	cr := &countingReaderAt{r: f}
	if err := inspectReader(cr, size, rep, opt); err != nil {
		return nil, &UnreadableError{fmt.Errorf("read %s: %w", path, err)}
	}
	rep.BytesRead = cr.n.Load()
	return rep, nil
}

// InspectReader is Inspect over any io.ReaderAt of the given size; it is
// what tests and benchmarks use to count the bytes a report needs.
func InspectReader(r io.ReaderAt, size int64, opt Options) *Report {
	rep := &Report{Size: size, Valid: true}
	cr := &countingReaderAt{r: r}
	if err := inspectReader(cr, size, rep, opt); err != nil {
		rep.invalid("read: %v", err)
		rep.finish()
	}
	rep.BytesRead = cr.n.Load()
	return rep
}

// Verify checks one checkpoint file or directory: its structure, and with
// deep every byte's checksum. It returns the report (Valid, Reason) and an
// error only when the input cannot be read at all.
func Verify(path string, deep bool) (*Report, error) {
	return Inspect(path, Options{Deep: deep, Structure: true})
}

func inspectReader(r io.ReaderAt, size int64, rep *Report, opt Options) error {
	defer rep.finish()
	if size == 0 {
		rep.invalid("empty file")
		return nil
	}
	// Probe readability first so an I/O error is not mistaken for corruption.
	var one [1]byte
	if _, err := r.ReadAt(one[:], 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	rep.Format = detectFile(r, size)
	switch rep.Format {
	case FormatTorchZip:
		inspectTorchZip(r, size, rep, opt)
	case FormatTorchLegacy:
		inspectLegacy(r, size, rep, opt)
	case FormatTorchTar:
		inspectTar(r, size, rep)
	case FormatSafetensors:
		inspectSafetensors(r, size, rep, opt)
	case FormatPickle:
		inspectPickle(r, size, rep)
	case FormatLFSPointer:
		p, _ := readLFSPointer(r, size)
		rep.invalid("%s", p.describe())
	default:
		rep.invalid("not a checkpoint: no torch zip, legacy torch, safetensors or pickle structure found")
	}
	return nil
}

func inspectPickle(r io.ReaderAt, size int64, rep *Report) {
	res, err := decodePickle(r, 0, size)
	recordGlobals(rep, res)
	if err != nil {
		rep.invalid("%v", err)
		return
	}
	w := newWalker(rep)
	w.walk(res.Value, "", 0, "")
	classifyLayout(rep, res.Value)
	if res.PersIDs > 0 {
		rep.finding("%d persistent ids: tensors stored outside this pickle", res.PersIDs)
	}
	if res.End < size {
		rep.finding("%d bytes follow the pickle's STOP", size-res.End)
	}
}

// inspectLegacy reads the pre-1.6 format: pickles for the magic number, the
// protocol version, sys_info and the object, then the list of storage keys,
// then each storage as an 8-byte element count and its raw bytes.
func inspectLegacy(r io.ReaderAt, size int64, rep *Report, opt Options) {
	var off int64
	var values []any
	for i := 0; i < 4; i++ {
		res, err := decodePickle(r, off, size)
		recordGlobals(rep, res)
		if err != nil {
			rep.invalid("legacy header pickle %d: %v", i+1, err)
			return
		}
		values = append(values, res.Value)
		off = res.End
	}
	if v, _ := values[1].(int64); v != 1001 {
		rep.invalid("legacy protocol version %v, torch writes 1001", values[1])
		return
	}
	if d, ok := values[2].(*pickle.Dict); ok {
		if le, ok := d.Get("little_endian"); ok && le == false {
			rep.finding("written on a big-endian machine")
		}
	}
	w := newWalker(rep)
	w.walk(values[3], "", 0, "")
	classifyLayout(rep, values[3])
	for _, b := range w.bad {
		rep.invalid("%s", b)
	}
	keysRes, err := decodePickle(r, off, size)
	recordGlobals(rep, keysRes)
	if err != nil {
		rep.invalid("legacy storage key list: %v", err)
		return
	}
	off = keysRes.End
	var keys []string
	switch kl := keysRes.Value.(type) {
	case *pickle.List:
		for _, k := range kl.Items {
			keys = append(keys, pickle.KeyString(k))
		}
	default:
		rep.invalid("legacy storage key list is %T", keysRes.Value)
		return
	}
	// Root storages only (views point into them).
	for _, k := range keys {
		st, ok := w.storages[k]
		if !ok {
			rep.invalid("storage %s is in the key list but not in the pickle", k)
			return
		}
		var hdr [8]byte
		if off+8 > size {
			rep.invalid("storage %s: file ends at %d, before its header: truncated", k, size)
			return
		}
		if _, err := r.ReadAt(hdr[:], off); err != nil {
			rep.invalid("storage %s header: %v", k, err)
			return
		}
		n := int64(binary.LittleEndian.Uint64(hdr[:]))
		es := elemSize[st.dtype]
		if n < 0 || n > size {
			rep.invalid("storage %s claims %d elements", k, n)
			return
		}
		if n != st.numel && st.viewOf == "" {
			rep.invalid("storage %s holds %d elements, the pickle says %d", k, n, st.numel)
			return
		}
		off += 8
		if n*es > size-off {
			rep.invalid("storage %s (%d bytes at %d) runs past the end of the file (%d bytes): truncated", k, n*es, off, size)
			return
		}
		rep.Storages = append(rep.Storages, Storage{Key: k, DType: st.dtype, Numel: n, Bytes: n * es, Location: st.location})
		rep.StorageBytes += n * es
		if opt.Deep {
			if err := readAll(r, off, n*es, opt.Progress); err != nil {
				rep.invalid("storage %s: %v", k, err)
				return
			}
		}
		off += n * es
	}
	for _, st := range w.storages {
		if st.viewOf != "" {
			if _, ok := w.storages[st.viewOf]; !ok {
				rep.invalid("view storage %s refers to missing storage %s", st.key, st.viewOf)
			}
		}
	}
	if off != size {
		rep.finding("%d bytes after the last storage", size-off)
	}
}

// readAll reads n bytes at off, for the deep pass over formats without CRCs:
// it proves the bytes are there and readable.
func readAll(r io.ReaderAt, off, n int64, progress func(int64)) error {
	bs := int64(1 << 20)
	if n < bs {
		bs = n
	}
	buf := make([]byte, bs)
	for n > 0 {
		k := int64(len(buf))
		if k > n {
			k = n
		}
		got, err := r.ReadAt(buf[:k], off)
		if int64(got) < k {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read at %d: %w", off, err)
		}
		if progress != nil {
			progress(k)
		}
		off += k
		n -= k
	}
	return nil
}

// inspectTar reports the pre-1.0 tar layout; its tensors are not decoded.
func inspectTar(r io.ReaderAt, size int64, rep *Report) {
	want := map[string]bool{"storages": false, "tensors": false, "pickle": false, "sys_info": false}
	var off int64
	for off+512 <= size {
		var blk [512]byte
		if _, err := r.ReadAt(blk[:], off); err != nil {
			rep.invalid("tar header at %d: %v", off, err)
			return
		}
		if blk[0] == 0 {
			break
		}
		name := string(trimNul(blk[:100]))
		n, err := parseOctal(blk[124:136])
		if err != nil {
			rep.invalid("tar header at %d: %v", off, err)
			return
		}
		if _, ok := want[name]; ok {
			want[name] = true
		}
		off += 512 + (n+511)/512*512
		if off > size {
			rep.invalid("tar record %q runs past the end of the file: truncated", name)
			return
		}
	}
	for k, seen := range want {
		if !seen {
			rep.invalid("legacy tar checkpoint has no %q record", k)
			return
		}
	}
	rep.finding("pre-1.0 tar layout: tensors are not listed")
}

func trimNul(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func parseOctal(b []byte) (int64, error) {
	var n int64
	for _, c := range trimNul(b) {
		if c == ' ' {
			continue
		}
		if c < '0' || c > '7' {
			return 0, fmt.Errorf("bad size field %q", b)
		}
		n = n*8 + int64(c-'0')
		if n > 1<<40 {
			return 0, errors.New("size field too large")
		}
	}
	return n, nil
}
