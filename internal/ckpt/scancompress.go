package ckpt

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
)

// maxDecompressed bounds what a compressed pickle is inflated to for the
// scan (held in memory: the decoder reads at offsets).
const maxDecompressed = 64 << 20

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
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd"
	case len(head) >= 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 && head[0] == 0x78:
		return "zlib"
	}
	return ""
}

// scanCompressed decompresses (bounded) and scans the pickles inside. xz
// and zstd are recognised but not decompressed by the scanner: not
// understood, never passed.
func scanCompressed(r io.ReaderAt, size int64, kind string, res *ScanResult) {
	res.Format = kind
	src := io.NewSectionReader(r, 0, size)
	var zr io.Reader
	var err error
	switch kind {
	case "gzip":
		var g *gzip.Reader
		if g, err = gzip.NewReader(src); err == nil {
			g.Multistream(true) // gzip.open reads every member
			zr = g
		}
	case "bz2":
		zr = bzip2.NewReader(src)
	case "zlib":
		zr, err = zlib.NewReader(src)
	default:
		res.notUnderstood("", "%s-compressed: the scanner does not decompress %s, and pickle.load of a decompressed stream (joblib, pandas) would unpickle what it holds", kind, kind)
		return
	}
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", kind, err))
		return
	}
	buf, err := io.ReadAll(io.LimitReader(zr, maxDecompressed+1))
	if err != nil && len(buf) == 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", kind, err))
		return
	}
	if len(buf) > maxDecompressed {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: decompresses to more than the scanner's %d-byte bound: what lies past it is not scanned", kind, maxDecompressed))
		buf = buf[:maxDecompressed]
	} else if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v after %d bytes", kind, err, len(buf)))
	}
	before := res.Pickles
	scanPickles(bytes.NewReader(buf), 0, int64(len(buf)), "", res, true)
	if res.Pickles == before && len(res.Errors) == 0 && len(res.Hits) == 0 {
		res.notUnderstood("", "%s-compressed data that holds no pickle (first byte 0x%02x)", kind, firstByte(buf))
		res.skipWhy = fmt.Sprintf("%s-compressed, and what it holds starts with byte 0x%02x, no pickle opcode: pickle.load refuses it there", kind, firstByte(buf))
	}
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
