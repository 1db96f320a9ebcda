package ckpt

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"
)

// maxDecompressed bounds what a compressed pickle is inflated to for the
// scan (held in memory: the decoder reads at offsets).
const maxDecompressed = 64 << 20

// dictBound is the largest LZMA dictionary the scanner allocates: what
// decoding maxDecompressed bytes can refer back to.
const dictBound = maxDecompressed + 1<<20

// maxZstdWindow is the largest zstd window the scanner decodes with: what
// the Python bindings accept by default (zstd's ZSTD_WINDOWLOG_LIMIT_DEFAULT,
// 2^27). A frame that asks for more is a finding, not a pass.
const maxZstdWindow = 1 << 27

// compressedFormat names the compression a file starts with, by magic:
// what pickle.load(gzip.open(...)), joblib and pandas read pickles from.
func compressedFormat(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return "gzip"
	case bytes.HasPrefix(head, []byte("BZh")) && len(head) > 3 && head[3] >= '1' && head[3] <= '9':
		return "bz2"
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return "xz"
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}),
		// A skippable frame (magic 0x184D2A50-5F): zstd's readers skip
		// it and decompress the frames after it.
		len(head) >= 4 && head[0]&0xf0 == 0x50 && bytes.Equal(head[1:4], []byte{0x2a, 0x4d, 0x18}):
		return "zstd"
	case len(head) >= 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 && head[0] == 0x78:
		return "zlib"
	}
	return ""
}

// lzmaAloneHeader says whether head starts like lzma's legacy format
// ("lzma-alone", .lzma) by liblzma's own checks, the ones lzma.open
// applies to any file that does not start with xz's magic (its auto
// decoder is picky): a properties byte with lc+lp <= 4, a dictionary size
// of 2^n or 2^n+2^(n-1) (or all ones), and an uncompressed size unknown
// or under 2^38. The format has no magic, so this is all there is to go
// by; a file that passes is unpickled by pickle.load(lzma.open(...)).
func lzmaAloneHeader(head []byte) bool {
	if len(head) < 13 || head[0] > (4*5+4)*9+8 {
		return false
	}
	p := int(head[0])
	pb := p / 45
	lp := (p - pb*45) / 9
	lc := p - pb*45 - lp*9
	if lc+lp > 4 {
		return false
	}
	if d := binary.LittleEndian.Uint32(head[1:5]); d != math.MaxUint32 {
		x := d - 1
		x |= x >> 2
		x |= x >> 3
		x |= x >> 4
		x |= x >> 8
		x |= x >> 16
		if x+1 != d {
			return false
		}
	}
	u := binary.LittleEndian.Uint64(head[5:13])
	return u == math.MaxUint64 || u < 1<<38
}

// countingReader counts the bytes a decoder took (it reads through
// ReadByte, so nothing is read ahead of what it used).
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// decompressor opens kind's decoder on src, reading every member, stream
// or frame one after another as Python's gzip.open, bz2.open, lzma.open
// and zstd readers do (file and size: the whole input, for lzma-alone's
// end); close releases what it holds.
func decompressor(kind string, src *countingReader, file io.ReaderAt, size int64) (r io.Reader, close func(), err error) {
	close = func() {}
	switch kind {
	case "gzip":
		g, err := gzip.NewReader(src)
		if err != nil {
			return nil, close, err
		}
		g.Multistream(true)
		return g, close, nil
	case "bz2":
		return bzip2.NewReader(src), close, nil // concatenated streams too
	case "zlib":
		z, err := zlib.NewReader(src)
		return z, close, err
	case "xz":
		// Every stream and its padding, as lzma.open reads them; the
		// dictionary is the size each block's header declares.
		x, err := xz.NewReader(src)
		return x, close, err
	case "zstd":
		// One decoder goroutine, its window bounded; every frame
		// (skippable ones skipped) is read in turn.
		d, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(maxZstdWindow))
		if err != nil {
			return nil, close, err
		}
		return d, d.Close, nil
	case "lzma":
		return &lzmaStreams{src: src, file: file, size: size}, close, nil
	}
	return nil, close, fmt.Errorf("no decoder for %s", kind)
}

// scanCompressed decompresses (bounded) and scans every pickle inside.
func scanCompressed(r io.ReaderAt, size int64, kind string, res *ScanResult) {
	res.Format = kind
	if kind == "xz" {
		// The decoder allocates each block's declared dictionary: read
		// every block header first.
		switch d, err := xzMaxDict(r, size); {
		case err != nil:
			res.Errors = append(res.Errors, fmt.Sprintf("xz: %v: not decompressed (lzma.open may read what the scanner does not)", err))
			return
		case d > dictBound:
			res.Errors = append(res.Errors, fmt.Sprintf("xz: a block declares a %d-byte dictionary, over the scanner's %d-byte bound: not decompressed", d, dictBound))
			return
		}
	}
	src := &countingReader{r: bufio.NewReader(io.NewSectionReader(r, 0, size))}
	zr, closeZ, err := decompressor(kind, src, r, size)
	defer closeZ()
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", kind, err))
		return
	}
	buf, err := readChunks(zr, maxDecompressed+1)
	n := buf.size
	switch {
	case n > maxDecompressed:
		res.Errors = append(res.Errors, fmt.Sprintf("%s: decompresses to more than the scanner's %d-byte bound: what lies past it is not scanned", kind, maxDecompressed))
		buf.size = maxDecompressed
	case err != nil && n == 0:
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", kind, err))
		return
	case err != nil:
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v after %d bytes", kind, err, n))
	}
	before := res.Pickles
	scanPickles(buf, 0, buf.size, "", res, true)
	if res.Pickles == before && len(res.Errors) == 0 && len(res.Hits) == 0 && buf.size == 0 {
		res.notUnderstood("", "%s-compressed data that decompresses to nothing", kind)
		res.skipWhy = fmt.Sprintf("%s-compressed, and it decompresses to nothing: pickle.load finds no pickle there", kind)
	} else if res.Pickles == before && len(res.Errors) == 0 && len(res.Hits) == 0 {
		res.notUnderstood("", "%s-compressed data that holds no pickle (first byte 0x%02x)", kind, buf.first())
		res.skipWhy = fmt.Sprintf("%s-compressed, and what it holds starts with byte 0x%02x, no pickle opcode: pickle.load refuses it there", kind, buf.first())
	}
}

// maxLzmaStreams bounds how many consecutive lzma-alone streams are read
// (18 zero bytes are one, empty).
const maxLzmaStreams = 10_000

// lzmaStreams reads lzma-alone streams one after another as lzma.open
// does: after a stream's end, what follows is read as another stream. What
// follows that is no stream is an error (lzma.open ignores it where
// liblzma's checks fail, and reads an xz stream there: the scanner does
// neither), except zero bytes to the end of at most 1 MiB, from which
// nothing decompresses. A stream whose size field is 0 decompresses to
// nothing: its header and the range coder's 5 bytes. Each stream's
// dictionary is its header's up to dictBound: the scan reads at most
// maxDecompressed+1 bytes out, so no match reaches further back, and a
// header's 4 GiB is never allocated.
type lzmaStreams struct {
	src  *countingReader // the decoder gets no io.ByteReader: it reads one byte at a time, so src counts what it used
	file io.ReaderAt
	size int64
	cur  io.Reader
	n    int
}

func (l *lzmaStreams) Read(p []byte) (int, error) {
	for {
		if l.cur == nil {
			at := l.src.n
			if at >= l.size || zerosToEnd(l.file, at, l.size) {
				return 0, io.EOF
			}
			hdr, _ := l.src.r.Peek(13)
			if !lzmaAloneHeader(hdr) {
				return 0, fmt.Errorf("%d bytes after the stream that ends at byte %d are no lzma stream: not scanned", l.size-at, at)
			}
			if l.n == maxLzmaStreams {
				return 0, fmt.Errorf("more than %d streams: bytes from %d on are not scanned", maxLzmaStreams, at)
			}
			l.n++
			hdr = bytes.Clone(hdr)
			if binary.LittleEndian.Uint64(hdr[5:13]) == 0 {
				if k, _ := l.src.r.Discard(18); k < 18 {
					return 0, io.ErrUnexpectedEOF
				}
				l.src.n += 18
				continue
			}
			l.src.r.Discard(13)
			l.src.n += 13
			dict := min(binary.LittleEndian.Uint32(hdr[1:5]), dictBound)
			binary.LittleEndian.PutUint32(hdr[1:5], dict)
			r, err := lzma.ReaderConfig{DictCap: max(int(dict), lzma.MinDictCap)}.NewReader(io.MultiReader(bytes.NewReader(hdr), l.src))
			if err != nil {
				return 0, err
			}
			l.cur = r
		}
		n, err := l.cur.Read(p)
		if err == io.EOF {
			l.cur = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

// zerosToEnd says whether r holds only zero bytes from off to size, and
// at most 1 MiB of them.
func zerosToEnd(r io.ReaderAt, off, size int64) bool {
	if size-off > 1<<20 {
		return false
	}
	b := make([]byte, size-off)
	if _, err := r.ReadAt(b, off); err != nil {
		return false
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// chunks holds decompressed bytes in pieces of chunkSize, so memory
// follows the output without a copy or a doubling; it is an io.ReaderAt
// for the pickle decoder.
type chunks struct {
	parts [][]byte
	size  int64
}

const chunkSize = 1 << 20

// readChunks reads r until it ends, fails or has given limit bytes; err is
// nil at a clean end (io.EOF) and the decoder's error otherwise.
func readChunks(r io.Reader, limit int64) (*chunks, error) {
	c := &chunks{}
	for c.size < limit {
		n := min(int64(chunkSize), limit-c.size)
		if len(c.parts) == 0 {
			n = min(n, 64<<10) // most compressed pickles are small
		}
		p := make([]byte, n)
		k := 0
		var err error
		for k < len(p) && err == nil {
			var m int
			m, err = r.Read(p[k:])
			k += m
		}
		if k > 0 {
			c.parts = append(c.parts, p[:k])
			c.size += int64(k)
		}
		if err == io.EOF {
			return c, nil
		}
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// ReadAt implements io.ReaderAt over the first size bytes.
func (c *chunks) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at byte %d", off)
	}
	n := 0
	var base int64 // offset of part
	for _, part := range c.parts {
		if n == len(p) {
			break
		}
		plen := min(int64(len(part)), c.size-base)
		if plen <= 0 {
			break
		}
		if pos := off + int64(n); pos >= base && pos < base+plen {
			n += copy(p[n:], part[pos-base:plen])
		}
		base += int64(len(part))
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (c *chunks) first() byte {
	if c.size == 0 {
		return 0
	}
	return c.parts[0][0]
}
