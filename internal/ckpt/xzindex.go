package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// maxXZIndex bounds one xz stream's index as read for xzMaxDict.
const maxXZIndex = 4 << 20

// xzMaxDict walks an xz file as `xz --list` does, from its end: each
// stream's footer gives its index, the index gives its blocks' sizes, and
// each block's header its filters. It returns the largest LZMA2
// dictionary a block declares: what a decoder allocates for it, before
// any data is decoded. A file it cannot walk (trailing bytes that are no
// stream, a damaged footer or index) is an error.
func xzMaxDict(r io.ReaderAt, size int64) (uint32, error) {
	var maxDict uint32
	read := func(off, n int64) ([]byte, error) {
		if off < 0 || n < 0 || off+n > size {
			return nil, fmt.Errorf("a size field points outside the file (byte %d, %d bytes)", off, n)
		}
		b := make([]byte, n)
		if _, err := r.ReadAt(b, off); err != nil {
			return nil, err
		}
		return b, nil
	}
	pos := size
	for pos > 0 {
		// Stream padding: NUL bytes in fours, between and after streams.
		for pos >= 4 {
			b, err := read(pos-4, 4)
			if err != nil {
				return 0, err
			}
			if !bytes.Equal(b, []byte{0, 0, 0, 0}) {
				break
			}
			pos -= 4
		}
		if pos == 0 {
			break
		}
		foot, err := read(pos-12, 12)
		if err != nil {
			return 0, err
		}
		if string(foot[10:]) != "YZ" || crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot[:4]) {
			return 0, fmt.Errorf("no xz stream footer ends at byte %d", pos)
		}
		checkSize := xzCheckSize(foot[9] & 0x0f)
		idxLen := (int64(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4
		if idxLen < 8 || idxLen > maxXZIndex {
			return 0, fmt.Errorf("an xz index of %d bytes, over the reader's %d", idxLen, maxXZIndex)
		}
		idxStart := pos - 12 - idxLen
		idx, err := read(idxStart, idxLen)
		if err != nil {
			return 0, err
		}
		if idx[0] != 0 || crc32.ChecksumIEEE(idx[:len(idx)-4]) != binary.LittleEndian.Uint32(idx[len(idx)-4:]) {
			return 0, fmt.Errorf("the xz index at byte %d is damaged", idxStart)
		}
		vr := &varintReader{b: idx[1 : len(idx)-4]}
		n := vr.next()
		var blocks []int64 // padded sizes
		var total int64
		for i := uint64(0); i < n && vr.err == nil; i++ {
			unpadded, _ := int64(vr.next()), vr.next()
			padded := (unpadded + 3) &^ 3
			if unpadded <= 0 || padded > size {
				return 0, fmt.Errorf("the xz index at byte %d lists a block of %d bytes", idxStart, unpadded)
			}
			blocks = append(blocks, padded)
			total += padded
			if total > size {
				return 0, fmt.Errorf("the xz index at byte %d lists more bytes than the file holds", idxStart)
			}
		}
		if vr.err != nil {
			return 0, fmt.Errorf("the xz index at byte %d: %w", idxStart, vr.err)
		}
		streamStart := idxStart - total - 12
		head, err := read(streamStart, 12)
		if err != nil {
			return 0, err
		}
		if !bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}) {
			return 0, fmt.Errorf("no xz stream header at byte %d, where the index at byte %d puts it", streamStart, idxStart)
		}
		off := streamStart + 12
		for _, padded := range blocks {
			d, err := xzBlockDict(read, off, padded-checkSize)
			if err != nil {
				return 0, err
			}
			maxDict = max(maxDict, d)
			off += padded
		}
		pos = streamStart
	}
	return maxDict, nil
}

// xzBlockDict reads the block header at off (of a block at most n bytes
// before its check) and returns its LZMA2 filter's dictionary size.
func xzBlockDict(read func(off, n int64) ([]byte, error), off, n int64) (uint32, error) {
	b, err := read(off, 1)
	if err != nil {
		return 0, err
	}
	hlen := (int64(b[0]) + 1) * 4
	if b[0] == 0 || hlen > n {
		return 0, fmt.Errorf("no xz block header at byte %d", off)
	}
	h, err := read(off, hlen)
	if err != nil {
		return 0, err
	}
	if crc32.ChecksumIEEE(h[:hlen-4]) != binary.LittleEndian.Uint32(h[hlen-4:]) {
		return 0, fmt.Errorf("the xz block header at byte %d is damaged", off)
	}
	flags := h[1]
	vr := &varintReader{b: h[2 : hlen-4]}
	if flags&0x40 != 0 {
		vr.next() // compressed size
	}
	if flags&0x80 != 0 {
		vr.next() // uncompressed size
	}
	var dict uint32
	for i := 0; i <= int(flags&3) && vr.err == nil; i++ {
		id, psize := vr.next(), vr.next()
		props := vr.take(psize)
		if id == 0x21 && len(props) == 1 { // LZMA2
			if props[0] > 40 {
				return 0, fmt.Errorf("the xz block at byte %d declares dictionary code %d (at most 40)", off, props[0])
			}
			dict = max(dict, xzDictSize(props[0]))
		}
	}
	if vr.err != nil {
		return 0, fmt.Errorf("the xz block header at byte %d: %w", off, vr.err)
	}
	return dict, nil
}

// xzDictSize decodes LZMA2's dictionary byte: 2 or 3 times a power of
// two from 4 KiB, 40 meaning 4 GiB - 1.
func xzDictSize(c byte) uint32 {
	if c == 40 {
		return 1<<32 - 1
	}
	return (2 | uint32(c&1)) << (c/2 + 11)
}

// xzCheckSize is the size of a block's check for the stream's check type.
func xzCheckSize(t byte) int64 {
	return [16]int64{0, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64}[t]
}

// varintReader reads xz's multibyte integers (7 bits a byte, at most 9).
type varintReader struct {
	b   []byte
	err error
}

func (v *varintReader) next() uint64 {
	var x uint64
	for i := 0; i < 9; i++ {
		if len(v.b) == 0 {
			v.err = errors.New("a number runs past its field")
			return 0
		}
		c := v.b[0]
		v.b = v.b[1:]
		x |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return x
		}
	}
	v.err = errors.New("a number longer than 9 bytes")
	return 0
}

func (v *varintReader) take(n uint64) []byte {
	if v.err != nil || n > uint64(len(v.b)) {
		if v.err == nil {
			v.err = errors.New("filter properties run past the header")
		}
		return nil
	}
	p := v.b[:n]
	v.b = v.b[n:]
	return p
}
