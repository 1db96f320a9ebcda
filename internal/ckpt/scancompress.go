package ckpt

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// maxDecompressed bounds what a compressed pickle is inflated to for the
// scan (held in memory: the decoder reads at offsets).
const maxDecompressed = 64 << 20

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

// decompressor opens kind's decoder on src, reading every member, stream
// or frame one after another as Python's gzip.open, bz2.open, lzma.open
// and zstd readers do; close releases what it holds.
func decompressor(kind string, src io.Reader) (r io.Reader, close func(), err error) {
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
	}
	return nil, close, fmt.Errorf("no decoder for %s", kind)
}

// scanCompressed decompresses (bounded) and scans every pickle inside.
func scanCompressed(r io.ReaderAt, size int64, kind string, res *ScanResult) {
	res.Format = kind
	zr, closeZ, err := decompressor(kind, io.NewSectionReader(r, 0, size))
	defer closeZ()
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", kind, err))
		return
	}
	// One allocation of the bound: the pages the output does not reach
	// are never touched, so memory follows what the file holds.
	buf := make([]byte, maxDecompressed+1)
	n, err := readFull(zr, buf)
	buf = buf[:n]
	switch {
	case n > maxDecompressed:
		res.Errors = append(res.Errors, fmt.Sprintf("%s: decompresses to more than the scanner's %d-byte bound: what lies past it is not scanned", kind, maxDecompressed))
		buf = buf[:min(n, maxDecompressed)]
	case err != nil && n == 0:
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", kind, err))
		return
	case err != nil:
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v after %d bytes", kind, err, n))
	}
	before := res.Pickles
	scanPickles(bytes.NewReader(buf), 0, int64(len(buf)), "", res, true)
	if res.Pickles == before && len(res.Errors) == 0 && len(res.Hits) == 0 {
		res.notUnderstood("", "%s-compressed data that holds no pickle (first byte 0x%02x)", kind, firstByte(buf))
		res.skipWhy = fmt.Sprintf("%s-compressed, and what it holds starts with byte 0x%02x, no pickle opcode: pickle.load refuses it there", kind, firstByte(buf))
	}
}

// readFull reads r into buf until buf is full or r ends; err is nil at a
// clean end (io.EOF) and the decoder's error otherwise.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
