// Package ziparc reads the central directory of a zip archive (zip32 and
// zip64) through an io.ReaderAt, reading only the directory and the local
// headers it is asked about. It exists because PyTorch checkpoints are zip
// archives of uncompressed, 64-byte-aligned records, and a checkpoint tool
// must tell a torn archive from a good one without reading its tensors.
//
// It never trusts a size or count from the file: every allocation is bounded
// by Limits and by the real length of the input. It never decompresses
// anything unless CheckCRC is called on a deflated record.
package ziparc

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

const (
	sigLocal     = 0x04034b50
	sigCentral   = 0x02014b50
	sigEOCD      = 0x06054b50
	sigEOCD64    = 0x06064b50
	sigLocator64 = 0x07064b50

	eocdLen      = 22
	locator64Len = 20
	eocd64Len    = 56
	centralLen   = 46
	localLen     = 30
	maxComment   = 65535
)

// Limits bounds what Open will allocate.
type Limits struct {
	MaxEntries      int   // records in the central directory
	MaxCentralBytes int64 // size of the central directory
}

// DefaultLimits fit any real checkpoint (torch writes one record per storage).
var DefaultLimits = Limits{MaxEntries: 1 << 20, MaxCentralBytes: 256 << 20}

// ErrNotZip means the input has no end-of-central-directory record at all.
var ErrNotZip = errors.New("no zip end of central directory record")

// Entry is one record of the central directory.
type Entry struct {
	Name         string
	Method       uint16 // 0 stored, 8 deflate
	Flags        uint16
	CRC32        uint32
	CompSize     uint64
	Size         uint64
	HeaderOffset uint64
}

// Archive is a parsed central directory.
type Archive struct {
	r         io.ReaderAt
	size      int64
	Entries   []Entry
	byName    map[string]int
	CDOffset  int64 // where the central directory starts
	Zip64     bool
	Duplicate []string // names recorded more than once
}

// Open parses the central directory of r (size bytes long).
func Open(r io.ReaderAt, size int64, lim Limits) (*Archive, error) {
	if lim.MaxEntries <= 0 {
		lim = DefaultLimits
	}
	if size < eocdLen {
		return nil, fmt.Errorf("%w: file is %d bytes", ErrNotZip, size)
	}
	tail := int64(eocdLen + maxComment)
	if tail > size {
		tail = size
	}
	buf := make([]byte, tail)
	if _, err := r.ReadAt(buf, size-tail); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read zip tail: %w", err)
	}
	// The EOCD is the last signature whose comment length reaches the end.
	eocd := -1
	for i := len(buf) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) == sigEOCD {
			clen := int(binary.LittleEndian.Uint16(buf[i+20:]))
			if i+eocdLen+clen <= len(buf) {
				eocd = i
				break
			}
		}
	}
	if eocd < 0 {
		return nil, ErrNotZip
	}
	eocdOff := size - tail + int64(eocd)
	e := buf[eocd:]
	disk := binary.LittleEndian.Uint16(e[4:])
	cdDisk := binary.LittleEndian.Uint16(e[6:])
	nDisk := uint64(binary.LittleEndian.Uint16(e[8:]))
	nTotal := uint64(binary.LittleEndian.Uint16(e[10:]))
	cdSize := uint64(binary.LittleEndian.Uint32(e[12:]))
	cdOff := uint64(binary.LittleEndian.Uint32(e[16:]))
	a := &Archive{r: r, size: size}
	endOfCD := uint64(eocdOff)

	if nTotal == 0xffff || nDisk == 0xffff || cdSize == 0xffffffff || cdOff == 0xffffffff || eocdOff >= locator64Len {
		// Look for a zip64 locator just before the EOCD.
		if eocdOff >= locator64Len {
			var loc [locator64Len]byte
			if _, err := r.ReadAt(loc[:], eocdOff-locator64Len); err != nil {
				return nil, fmt.Errorf("read zip64 locator: %w", err)
			}
			if binary.LittleEndian.Uint32(loc[:]) == sigLocator64 {
				off64 := binary.LittleEndian.Uint64(loc[8:])
				if off64 > uint64(eocdOff-locator64Len) || uint64(eocdOff-locator64Len)-off64 < eocd64Len {
					return nil, fmt.Errorf("zip64 end record offset %d out of range", off64)
				}
				var z [eocd64Len]byte
				if _, err := r.ReadAt(z[:], int64(off64)); err != nil {
					return nil, fmt.Errorf("read zip64 end record: %w", err)
				}
				if binary.LittleEndian.Uint32(z[:]) != sigEOCD64 {
					return nil, fmt.Errorf("zip64 end record signature missing at %d", off64)
				}
				a.Zip64 = true
				disk, cdDisk = 0, 0
				if binary.LittleEndian.Uint32(z[16:]) != 0 || binary.LittleEndian.Uint32(z[20:]) != 0 {
					disk = 1
				}
				nDisk = binary.LittleEndian.Uint64(z[24:])
				nTotal = binary.LittleEndian.Uint64(z[32:])
				cdSize = binary.LittleEndian.Uint64(z[40:])
				cdOff = binary.LittleEndian.Uint64(z[48:])
				endOfCD = off64
			} else if nTotal == 0xffff && cdSize == 0xffffffff {
				return nil, errors.New("zip64 archive without zip64 locator")
			}
		}
	}
	if disk != 0 || cdDisk != 0 || nDisk != nTotal {
		return nil, errors.New("multi-disk zip archives are not supported")
	}
	if cdOff > endOfCD || cdSize > endOfCD-cdOff {
		return nil, fmt.Errorf("central directory (offset %d, %d bytes) runs past its end record at %d: archive truncated or corrupt", cdOff, cdSize, endOfCD)
	}
	if int64(cdSize) > lim.MaxCentralBytes {
		return nil, fmt.Errorf("central directory is %d bytes, over the %d-byte limit", cdSize, lim.MaxCentralBytes)
	}
	if nTotal > cdSize/centralLen || nTotal > uint64(lim.MaxEntries) {
		return nil, fmt.Errorf("central directory claims %d records in %d bytes", nTotal, cdSize)
	}
	cd := make([]byte, cdSize)
	if _, err := r.ReadAt(cd, int64(cdOff)); err != nil {
		return nil, fmt.Errorf("read central directory: %w", err)
	}
	a.CDOffset = int64(cdOff)
	a.Entries = make([]Entry, 0, nTotal)
	a.byName = make(map[string]int, nTotal)
	p := cd
	for i := uint64(0); i < nTotal; i++ {
		if len(p) < centralLen || binary.LittleEndian.Uint32(p) != sigCentral {
			return nil, fmt.Errorf("central directory record %d is malformed", i)
		}
		var en Entry
		en.Flags = binary.LittleEndian.Uint16(p[8:])
		en.Method = binary.LittleEndian.Uint16(p[10:])
		en.CRC32 = binary.LittleEndian.Uint32(p[16:])
		en.CompSize = uint64(binary.LittleEndian.Uint32(p[20:]))
		en.Size = uint64(binary.LittleEndian.Uint32(p[24:]))
		nl := int(binary.LittleEndian.Uint16(p[28:]))
		xl := int(binary.LittleEndian.Uint16(p[30:]))
		cl := int(binary.LittleEndian.Uint16(p[32:]))
		en.HeaderOffset = uint64(binary.LittleEndian.Uint32(p[42:]))
		if len(p) < centralLen+nl+xl+cl {
			return nil, fmt.Errorf("central directory record %d runs past the directory", i)
		}
		en.Name = string(p[centralLen : centralLen+nl])
		extra := p[centralLen+nl : centralLen+nl+xl]
		if err := applyZip64Extra(&en, extra); err != nil {
			return nil, fmt.Errorf("record %q: %w", en.Name, err)
		}
		if en.HeaderOffset >= uint64(a.CDOffset) {
			return nil, fmt.Errorf("record %q: local header offset %d is past the central directory", en.Name, en.HeaderOffset)
		}
		if en.CompSize > uint64(a.CDOffset)-en.HeaderOffset {
			return nil, fmt.Errorf("record %q: %d bytes at offset %d run into the central directory", en.Name, en.CompSize, en.HeaderOffset)
		}
		if _, dup := a.byName[en.Name]; dup {
			a.Duplicate = append(a.Duplicate, en.Name)
		} else {
			a.byName[en.Name] = len(a.Entries)
		}
		a.Entries = append(a.Entries, en)
		p = p[centralLen+nl+xl+cl:]
	}
	return a, nil
}

func applyZip64Extra(en *Entry, extra []byte) error {
	for len(extra) >= 4 {
		id := binary.LittleEndian.Uint16(extra)
		n := int(binary.LittleEndian.Uint16(extra[2:]))
		if len(extra) < 4+n {
			return errors.New("extra field runs past its record")
		}
		if id == 0x0001 {
			f := extra[4 : 4+n]
			next := func() (uint64, error) {
				if len(f) < 8 {
					return 0, errors.New("short zip64 extra field")
				}
				v := binary.LittleEndian.Uint64(f)
				f = f[8:]
				return v, nil
			}
			var err error
			if en.Size == 0xffffffff {
				if en.Size, err = next(); err != nil {
					return err
				}
			}
			if en.CompSize == 0xffffffff {
				if en.CompSize, err = next(); err != nil {
					return err
				}
			}
			if en.HeaderOffset == 0xffffffff {
				if en.HeaderOffset, err = next(); err != nil {
					return err
				}
			}
		}
		extra = extra[4+n:]
	}
	return nil
}

// Size is the length of the archive.
func (a *Archive) Size() int64 { return a.size }

// Lookup returns the record named name.
func (a *Archive) Lookup(name string) (*Entry, bool) {
	i, ok := a.byName[name]
	if !ok {
		return nil, false
	}
	return &a.Entries[i], true
}

// DataOffset reads e's local header and returns where its data begins.
func (a *Archive) DataOffset(e *Entry) (int64, error) {
	var h [localLen]byte
	if _, err := a.r.ReadAt(h[:], int64(e.HeaderOffset)); err != nil {
		return 0, fmt.Errorf("read local header of %q: %w", e.Name, err)
	}
	if binary.LittleEndian.Uint32(h[:]) != sigLocal {
		return 0, fmt.Errorf("local header of %q missing at offset %d", e.Name, e.HeaderOffset)
	}
	nl := uint64(binary.LittleEndian.Uint16(h[26:]))
	xl := uint64(binary.LittleEndian.Uint16(h[28:]))
	off := e.HeaderOffset + localLen + nl + xl
	if off > uint64(a.CDOffset) || e.CompSize > uint64(a.CDOffset)-off {
		return 0, fmt.Errorf("data of %q (%d bytes at %d) runs into the central directory", e.Name, e.CompSize, off)
	}
	if nl == uint64(len(e.Name)) {
		name := make([]byte, nl)
		if _, err := a.r.ReadAt(name, int64(e.HeaderOffset)+localLen); err != nil {
			return 0, fmt.Errorf("read local name of %q: %w", e.Name, err)
		}
		if string(name) != e.Name {
			return 0, fmt.Errorf("local header at %d names %q, central directory says %q", e.HeaderOffset, name, e.Name)
		}
	}
	return int64(off), nil
}

// ReadSmall returns the whole (decompressed) content of e when it is at most
// max bytes; it is meant for the pickle and small metadata records.
func (a *Archive) ReadSmall(e *Entry, max int64) ([]byte, error) {
	if e.Size > uint64(max) {
		return nil, fmt.Errorf("record %q is %d bytes, over the %d-byte limit", e.Name, e.Size, max)
	}
	off, err := a.DataOffset(e)
	if err != nil {
		return nil, err
	}
	switch e.Method {
	case 0:
		if e.CompSize != e.Size {
			return nil, fmt.Errorf("stored record %q has size %d but %d stored bytes", e.Name, e.Size, e.CompSize)
		}
		b := make([]byte, e.Size)
		if _, err := a.r.ReadAt(b, off); err != nil {
			return nil, fmt.Errorf("read %q: %w", e.Name, err)
		}
		return b, nil
	case 8:
		fr := flate.NewReader(io.NewSectionReader(a.r, off, int64(e.CompSize)))
		defer fr.Close()
		var buf bytes.Buffer
		n, err := io.Copy(&buf, io.LimitReader(fr, int64(e.Size)+1))
		if err != nil {
			return nil, fmt.Errorf("inflate %q: %w", e.Name, err)
		}
		if uint64(n) != e.Size {
			return nil, fmt.Errorf("record %q inflates to %d bytes, directory says %d", e.Name, n, e.Size)
		}
		return buf.Bytes(), nil
	default:
		return nil, fmt.Errorf("record %q uses unsupported compression method %d", e.Name, e.Method)
	}
}

// CheckCRC reads e's data and compares its CRC-32 with the directory's.
// progress, when not nil, is called with the number of bytes read so far.
func (a *Archive) CheckCRC(e *Entry, buf []byte, progress func(int64)) error {
	off, err := a.DataOffset(e)
	if err != nil {
		return err
	}
	var src io.Reader = io.NewSectionReader(a.r, off, int64(e.CompSize))
	switch e.Method {
	case 0:
		if e.CompSize != e.Size {
			return fmt.Errorf("stored record %q has size %d but %d stored bytes", e.Name, e.Size, e.CompSize)
		}
	case 8:
		fr := flate.NewReader(src)
		defer fr.Close()
		src = io.LimitReader(fr, int64(e.Size)+1)
	default:
		return fmt.Errorf("record %q uses unsupported compression method %d", e.Name, e.Method)
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

// FirstLocalName returns the name in the local header at the start of r, for
// telling a torn archive (no central directory) that still starts like one.
func FirstLocalName(r io.ReaderAt) (string, bool) {
	var h [localLen]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return "", false
	}
	if binary.LittleEndian.Uint32(h[:]) != sigLocal {
		return "", false
	}
	nl := int(binary.LittleEndian.Uint16(h[26:]))
	name := make([]byte, nl)
	if _, err := r.ReadAt(name, localLen); err != nil {
		return "", false
	}
	return string(name), true
}
