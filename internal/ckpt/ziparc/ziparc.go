// Package ziparc reads the central directory of a zip archive (zip32 and
// zip64) through an io.ReaderAt, reading only the directory and the local
// headers. It exists because PyTorch checkpoints are zip archives of
// uncompressed, 64-byte-aligned records, and a checkpoint tool must tell a
// torn archive from a good one without reading its tensors.
//
// The archive is seen the way torch.load sees it. torch reads zips with
// miniz (caffe2's PyTorchStreamReader): it finds the end record, reads the
// central directory, looks records up by their central-directory name
// (ignoring ASCII case), and takes each record's data from the offset in the
// central directory, skipping the local header by the name and extra lengths
// written there, with the method and sizes of the central directory; the
// local name, method and sizes are never compared. Open accepts what miniz
// accepts and reads each record as miniz reads it, and records in
// Anomalies every place where that view differs from what a stricter or a
// streaming zip reader would see (local name or sizes that disagree with the
// directory, records whose bytes overlap, end records that a strict reader
// would not pick, "disk 1" end records, bytes hidden between records,
// directory bytes past the last record). A well-formed archive, torch's or
// anyone's, has none.
//
// It never trusts a size or count from the file: every allocation is bounded
// by Limits and by the real length of the input, and the bytes inflated from
// deflated records are bounded per archive (see Limits.MaxInflate).
package ziparc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

const (
	sigLocal      = 0x04034b50
	sigCentral    = 0x02014b50
	sigEOCD       = 0x06054b50
	sigEOCD64     = 0x06064b50
	sigLocator64  = 0x07064b50
	sigDescriptor = 0x08074b50

	eocdLen      = 22
	locator64Len = 20
	eocd64Len    = 56
	centralLen   = 46
	localLen     = 30
	maxComment   = 65535

	flagEncrypted   = 0x0001
	flagDescriptor  = 0x0008
	flagPatch       = 0x0020
	flagStrongCrypt = 0x0040
	flagMaskedLocal = 0x2000
)

// Limits bounds what Open will allocate and what reading records may inflate.
type Limits struct {
	MaxEntries      int   // records in the central directory
	MaxCentralBytes int64 // size of the central directory
	// MaxInflate and InflateRatio bound the bytes inflated from deflated
	// records over the life of one Archive: at most the larger of
	// MaxInflate and InflateRatio × the archive's size. Past it every read
	// of a deflated record fails with ErrInflateBudget. Stored records
	// (all of torch's) do not count.
	MaxInflate   int64
	InflateRatio int64
}

// DefaultLimits fit any real checkpoint (torch writes one record per
// storage, all stored: 131072 records is a state_dict of over a hundred
// thousand tensors, whose central directory is some 15 MiB) and keep the
// cost of Open under a second and 100 MB for any input: a million records
// are refused from the end record's count, before anything is read. The
// inflate budget is 1 GiB, or 16 bytes per byte of the archive for a large
// deflated archive.
var DefaultLimits = Limits{MaxEntries: 1 << 17, MaxCentralBytes: 32 << 20, MaxInflate: 1 << 30, InflateRatio: 16}

// ErrNotZip means the input has no end-of-central-directory record at all.
var ErrNotZip = errors.New("no zip end of central directory record")

// ErrLimit is wrapped by Open's errors that come from Limits rather than
// from the archive being malformed: torch may still read such an archive.
var ErrLimit = errors.New("zip limit exceeded")

// ErrInflateBudget is wrapped by read errors once the archive's inflate
// budget is spent.
var ErrInflateBudget = errors.New("inflate budget exhausted")

// Entry is one record of the central directory.
type Entry struct {
	Name         string
	Method       uint16 // 0 stored, 8 deflate
	Flags        uint16
	CRC32        uint32
	CompSize     uint64
	Size         uint64
	HeaderOffset uint64
	DiskStart    uint16
	ExternalAttr uint32

	// DataOff is where torch's reader takes the record's data from: the
	// local header's offset plus its fixed part and the name and extra
	// lengths written in it. -1 when there is no local header there.
	DataOff int64
	// LocalName is the name written in the local header.
	LocalName string
	// ReadErr is why torch's reader cannot read the record (nil when it can).
	ReadErr error
}

// Archive is a parsed central directory.
type Archive struct {
	r         io.ReaderAt
	size      int64
	Entries   []Entry
	byName    map[string]int // exact name → first entry
	byFold    map[string]int // ASCII-lowercased name → first entry
	CDOffset  int64          // where the central directory starts
	CDSize    int64
	Zip64     bool
	Duplicate []string // names recorded more than once (ignoring ASCII case, as torch looks them up)

	anomalies []string
	kinds     map[string]int
	inflated  int64
	budget    int64
}

// Open parses the central directory of r (size bytes long).
func Open(r io.ReaderAt, size int64, lim Limits) (*Archive, error) {
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = DefaultLimits.MaxEntries
	}
	if lim.MaxCentralBytes <= 0 {
		lim.MaxCentralBytes = DefaultLimits.MaxCentralBytes
	}
	if lim.MaxInflate <= 0 {
		lim.MaxInflate = DefaultLimits.MaxInflate
	}
	if lim.InflateRatio <= 0 {
		lim.InflateRatio = DefaultLimits.InflateRatio
	}
	if size < eocdLen {
		return nil, fmt.Errorf("%w: file is %d bytes", ErrNotZip, size)
	}
	a := &Archive{r: r, size: size, budget: lim.MaxInflate}
	if size > 0 && lim.InflateRatio > 0 && size <= (1<<62)/lim.InflateRatio && size*lim.InflateRatio > a.budget {
		a.budget = size * lim.InflateRatio
	}
	// miniz searches back from the end in 4 KiB blocks and gives up once it
	// is 64 KiB + 22 bytes from the end; read that much (plus a block).
	tail := int64(eocdLen + maxComment + 4096)
	if tail > size {
		tail = size
	}
	buf := make([]byte, tail)
	if _, err := r.ReadAt(buf, size-tail); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read zip tail: %w", err)
	}
	// torch's reader takes the last end-record signature with at least 22
	// bytes after it, whatever its comment length says; a strict reader
	// takes the last one whose comment ends exactly at the end of the file.
	eocd, strict := -1, -1
	for i := len(buf) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) != sigEOCD {
			continue
		}
		if eocd < 0 {
			eocd = i
		}
		clen := int(binary.LittleEndian.Uint16(buf[i+20:]))
		if i+eocdLen+clen == len(buf) {
			strict = i
			break
		}
	}
	if eocd < 0 {
		return nil, ErrNotZip
	}
	eocdOff := size - tail + int64(eocd)
	e := buf[eocd:]
	if clen := int(binary.LittleEndian.Uint16(e[20:])); eocd+eocdLen+clen != len(buf) {
		a.anomaly("the end record at %d says %d comment bytes follow it, the file has %d: torch's reader uses it, a strict reader %s",
			eocdOff, clen, len(buf)-eocd-eocdLen, map[bool]string{true: fmt.Sprintf("uses the one at %d", size-tail+int64(strict)), false: "finds none"}[strict >= 0])
	}
	disk := uint64(binary.LittleEndian.Uint16(e[4:]))
	cdDisk := uint64(binary.LittleEndian.Uint16(e[6:]))
	nDisk := uint64(binary.LittleEndian.Uint16(e[8:]))
	nTotal := uint64(binary.LittleEndian.Uint16(e[10:]))
	cdSize := uint64(binary.LittleEndian.Uint32(e[12:]))
	cdOff := uint64(binary.LittleEndian.Uint32(e[16:]))
	endOfCD := uint64(eocdOff)

	if eocdOff >= locator64Len+eocd64Len {
		var loc [locator64Len]byte
		if _, err := r.ReadAt(loc[:], eocdOff-locator64Len); err != nil {
			return nil, fmt.Errorf("read zip64 locator: %w", err)
		}
		if binary.LittleEndian.Uint32(loc[:]) == sigLocator64 {
			off64 := binary.LittleEndian.Uint64(loc[8:])
			if off64 > uint64(size-eocd64Len) {
				return nil, fmt.Errorf("zip64 end record offset %d out of range", off64)
			}
			var z [eocd64Len]byte
			if _, err := r.ReadAt(z[:], int64(off64)); err != nil {
				return nil, fmt.Errorf("read zip64 end record: %w", err)
			}
			if binary.LittleEndian.Uint32(z[:]) != sigEOCD64 {
				a.anomaly("the zip64 locator points at %d, where there is no zip64 end record", off64)
			} else {
				a.Zip64 = true
				if binary.LittleEndian.Uint64(z[4:]) < eocd64Len-12 {
					return nil, fmt.Errorf("zip64 end record at %d is too short", off64)
				}
				if binary.LittleEndian.Uint32(loc[16:]) != 1 {
					return nil, errors.New("multi-disk zip archives are not supported")
				}
				d64 := uint64(binary.LittleEndian.Uint32(z[16:]))
				cd64 := uint64(binary.LittleEndian.Uint32(z[20:]))
				n64 := binary.LittleEndian.Uint64(z[24:])
				t64 := binary.LittleEndian.Uint64(z[32:])
				s64 := binary.LittleEndian.Uint64(z[40:])
				o64 := binary.LittleEndian.Uint64(z[48:])
				if t64 > 0xffffffff || n64 > 0xffffffff || s64 > 0xffffffff {
					return nil, fmt.Errorf("zip64 end record claims %d records in %d bytes", t64, s64)
				}
				for _, p := range [][3]uint64{{nTotal, t64, 0xffff}, {nDisk, n64, 0xffff}, {cdSize, s64, 0xffffffff}, {cdOff, o64, 0xffffffff}} {
					if p[0] != p[1] && p[0] != p[2] {
						a.anomaly("the zip64 end record (%d records, %d directory bytes at %d) disagrees with the zip32 one (%d records, %d bytes at %d): torch's reader uses the zip64 one",
							t64, s64, o64, nTotal, cdSize, cdOff)
						break
					}
				}
				disk, cdDisk, nDisk, nTotal, cdSize, cdOff = d64, cd64, n64, t64, s64, o64
				endOfCD = off64
			}
		}
	}
	if nDisk != nTotal {
		return nil, errors.New("multi-disk zip archives are not supported")
	}
	if disk|cdDisk != 0 {
		if disk != 1 || cdDisk != 1 {
			return nil, errors.New("multi-disk zip archives are not supported")
		}
		a.anomaly("the end record says this is disk 1 of a multi-disk archive: torch's reader accepts it, most zip readers refuse the file")
	}
	if cdSize < nTotal*centralLen || cdOff > uint64(size) || cdSize > uint64(size)-cdOff {
		return nil, fmt.Errorf("central directory (offset %d, %d bytes, %d records) runs past the end of the file (%d bytes): archive truncated or corrupt", cdOff, cdSize, nTotal, size)
	}
	if cdOff+cdSize != endOfCD {
		a.anomaly("the central directory (%d bytes at %d) does not end where the end record begins (%d)", cdSize, cdOff, endOfCD)
	}
	if int64(cdSize) > lim.MaxCentralBytes {
		return nil, fmt.Errorf("%w: central directory is %d bytes, over the %d-byte limit", ErrLimit, cdSize, lim.MaxCentralBytes)
	}
	if nTotal > uint64(lim.MaxEntries) {
		return nil, fmt.Errorf("%w: central directory claims %d records, over the %d-record limit", ErrLimit, nTotal, lim.MaxEntries)
	}
	cd := make([]byte, cdSize)
	if _, err := r.ReadAt(cd, int64(cdOff)); err != nil {
		return nil, fmt.Errorf("read central directory: %w", err)
	}
	a.CDOffset, a.CDSize = int64(cdOff), int64(cdSize)
	a.Entries = make([]Entry, 0, nTotal)
	a.byName = make(map[string]int, nTotal)
	a.byFold = make(map[string]int, nTotal)
	p := cd
	for i := uint64(0); i < nTotal; i++ {
		if len(p) < centralLen || binary.LittleEndian.Uint32(p) != sigCentral {
			return nil, fmt.Errorf("central directory record %d is malformed", i)
		}
		en := Entry{DataOff: -1}
		en.Flags = binary.LittleEndian.Uint16(p[8:])
		en.Method = binary.LittleEndian.Uint16(p[10:])
		en.CRC32 = binary.LittleEndian.Uint32(p[16:])
		comp32 := binary.LittleEndian.Uint32(p[20:])
		size32 := binary.LittleEndian.Uint32(p[24:])
		en.CompSize, en.Size = uint64(comp32), uint64(size32)
		nl := int(binary.LittleEndian.Uint16(p[28:]))
		xl := int(binary.LittleEndian.Uint16(p[30:]))
		cl := int(binary.LittleEndian.Uint16(p[32:]))
		en.DiskStart = binary.LittleEndian.Uint16(p[34:])
		en.ExternalAttr = binary.LittleEndian.Uint32(p[38:])
		off32 := binary.LittleEndian.Uint32(p[42:])
		en.HeaderOffset = uint64(off32)
		if len(p) < centralLen+nl+xl+cl {
			return nil, fmt.Errorf("central directory record %d runs past the directory", i)
		}
		en.Name = string(p[centralLen : centralLen+nl])
		if comp32 == 0xffffffff || size32 == 0xffffffff || off32 == 0xffffffff {
			if err := applyZip64Extra(&en, p[centralLen+nl:centralLen+nl+xl]); err != nil {
				return nil, fmt.Errorf("record %q: %w", en.Name, err)
			}
		}
		if comp32 != 0xffffffff && size32 != 0xffffffff {
			// miniz reads the method and the modification time as one
			// 32-bit word here, so the stored-size rule only holds for a
			// zero time.
			if (binary.LittleEndian.Uint32(p[10:]) == 0 && size32 != comp32) || (size32 != 0 && comp32 == 0) {
				return nil, fmt.Errorf("record %q: %d bytes stored as %d", en.Name, size32, comp32)
			}
			if uint64(off32)+localLen+uint64(comp32) > uint64(size) {
				return nil, fmt.Errorf("record %q: %d bytes at offset %d run past the end of the file (%d bytes)", en.Name, comp32, off32, size)
			}
		}
		if en.DiskStart == 0xffff || (uint64(en.DiskStart) != disk && en.DiskStart != 1) {
			return nil, errors.New("multi-disk zip archives are not supported")
		}
		if en.Flags&flagMaskedLocal != 0 {
			return nil, fmt.Errorf("record %q: masked local headers (encryption) are not supported", en.Name)
		}
		if en.DiskStart != 0 {
			a.anomaly("record %q says it starts on disk %d", en.Name, en.DiskStart)
		}
		if en.Method == 0 && en.CompSize != en.Size && !en.Encrypted() {
			// (an encrypted record stores a 12-byte header more; torch's
			// reader refuses it whole, so the sizes do not matter)
			a.anomaly("stored record %q has size %d but %d stored bytes: torch's reader reads %d", en.Name, en.Size, en.CompSize, en.Size)
		}
		if en.Size > 0 && (strings.HasSuffix(en.Name, "/") || en.ExternalAttr&0x10 != 0) {
			a.anomaly("record %q holds %d bytes but is marked as a directory: torch's reader returns none of them (an uninitialised buffer)", en.Name, en.Size)
		}
		if strings.IndexByte(en.Name, 0) >= 0 {
			a.anomaly("record name %q holds a NUL byte", en.Name)
		}
		if _, dup := a.byName[en.Name]; dup {
			a.Duplicate = append(a.Duplicate, en.Name)
			a.anomaly("record %q appears more than once in the central directory: which one torch reads depends on its sort", en.Name)
		} else {
			a.byName[en.Name] = len(a.Entries)
			fold := foldASCII(en.Name)
			if j, dup := a.byFold[fold]; dup {
				a.Duplicate = append(a.Duplicate, en.Name)
				a.anomaly("records %q and %q differ only in case: torch looks names up ignoring case", a.Entries[j].Name, en.Name)
			} else {
				a.byFold[fold] = len(a.Entries)
			}
		}
		a.Entries = append(a.Entries, en)
		p = p[centralLen+nl+xl+cl:]
	}
	if len(p) > 0 {
		what := "bytes"
		if len(p) >= 4 && binary.LittleEndian.Uint32(p) == sigCentral {
			what = "bytes (another central record) that torch's reader ignores and readers that read to the directory's size do not"
		}
		a.anomaly("the central directory holds %d %s after its %d records", len(p), what, nTotal)
	}
	a.readLocals()
	a.finishAnomalies()
	return a, nil
}

func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
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
			return nil
		}
		extra = extra[4+n:]
	}
	if len(extra) != 0 {
		return errors.New("extra field runs past its record")
	}
	return nil
}

// Size is the length of the archive.
func (a *Archive) Size() int64 { return a.size }

// Lookup returns the record torch's reader finds for name: the record of
// that exact name, else one whose name matches ignoring ASCII case.
func (a *Archive) Lookup(name string) (*Entry, bool) {
	i, ok := a.byName[name]
	if !ok {
		if i, ok = a.byFold[foldASCII(name)]; !ok {
			return nil, false
		}
	}
	return &a.Entries[i], true
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
