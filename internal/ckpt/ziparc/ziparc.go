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
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
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

// anomaly records one anomaly; of each kind (format) the first three are
// kept and the rest counted (see finishAnomalies).
func (a *Archive) anomaly(format string, args ...any) {
	if a.kinds == nil {
		a.kinds = map[string]int{}
	}
	a.kinds[format]++
	if a.kinds[format] <= 3 {
		a.anomalies = append(a.anomalies, fmt.Sprintf(format, args...))
	}
}

func (a *Archive) finishAnomalies() {
	more := 0
	for _, n := range a.kinds {
		if n > 3 {
			more += n - 3
		}
	}
	if more > 0 {
		a.anomalies = append(a.anomalies, fmt.Sprintf("%d more anomalies of the kinds above", more))
	}
}

// Anomalies lists the ways in which torch's reader (miniz) and a stricter or
// streaming zip reader see this archive differently: a local header whose
// name, method, sizes or CRC disagree with the central directory, records
// whose bytes overlap each other or the central directory, the same name
// twice (also ignoring case), bytes between records that hold another local
// header, end records that a strict reader would not pick or that say
// "disk 1", directory bytes past the last record. Empty for any archive
// written by torch.save or a normal zip writer. Each is one sentence.
func (a *Archive) Anomalies() []string { return a.anomalies }

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

// span is the bytes of one record: local header, data, data descriptor.
type span struct {
	i          int
	start, end int64 // local header .. end of data
}

// readLocals reads every record's local header, sets DataOff, LocalName and
// ReadErr as torch's reader would see them, and records the anomalies:
// local fields that disagree with the directory, overlapping records,
// hidden local headers between records.
func (a *Archive) readLocals() {
	var spans []span
	var hdr [localLen]byte
	for i := range a.Entries {
		e := &a.Entries[i]
		if a.size < localLen || e.HeaderOffset > uint64(a.size-localLen) {
			e.ReadErr = fmt.Errorf("local header of %q at offset %d is past the end of the file", e.Name, e.HeaderOffset)
			continue
		}
		if _, err := a.r.ReadAt(hdr[:], int64(e.HeaderOffset)); err != nil {
			e.ReadErr = fmt.Errorf("read local header of %q: %w", e.Name, err)
			continue
		}
		if binary.LittleEndian.Uint32(hdr[:]) != sigLocal {
			e.ReadErr = fmt.Errorf("local header of %q missing at offset %d", e.Name, e.HeaderOffset)
			continue
		}
		nl := int64(binary.LittleEndian.Uint16(hdr[26:]))
		xl := int64(binary.LittleEndian.Uint16(hdr[28:]))
		off := int64(e.HeaderOffset) + localLen + nl + xl
		e.DataOff = off
		// What torch reads: CompSize bytes (Size for a stored record).
		n := e.CompSize
		if e.Method == 0 && e.Size > n {
			n = e.Size
		}
		if off > a.size || n > uint64(a.size-off) {
			e.ReadErr = fmt.Errorf("data of %q (%d bytes at %d) runs past the end of the file (%d bytes)", e.Name, n, off, a.size)
		}
		if nl+xl <= 1<<17 && off <= a.size {
			lx := make([]byte, nl+xl)
			if _, err := a.r.ReadAt(lx, int64(e.HeaderOffset)+localLen); err == nil {
				e.LocalName = string(lx[:nl])
				if e.LocalName != e.Name {
					a.anomaly("the local header at %d names %q, the central directory %q: torch reads it as %q, streaming readers as %q", e.HeaderOffset, e.LocalName, e.Name, e.Name, e.LocalName)
				}
				a.checkLocalFields(e, hdr[:], lx[nl:])
			}
		}
		end := off
		if e.ReadErr == nil {
			end = off + int64(n)
		}
		spans = append(spans, span{i: i, start: int64(e.HeaderOffset), end: end})
	}
	sort.Slice(spans, func(x, y int) bool {
		if spans[x].start != spans[y].start {
			return spans[x].start < spans[y].start
		}
		return spans[x].i < spans[y].i
	})
	gapBudget := int64(16 << 20)
	reach := int64(0) // furthest end of data so far
	reachIdx := -1
	for k, s := range spans {
		e := &a.Entries[s.i]
		if k == 0 && s.start != 0 {
			a.anomaly("the first record starts at offset %d: %d bytes before it belong to no record", s.start, s.start)
			a.checkGap(0, s.start, nil, &gapBudget)
		}
		if reachIdx >= 0 && s.start < reach {
			a.anomaly("records %q and %q overlap: the bytes at %d..%d belong to both", a.Entries[reachIdx].Name, e.Name, s.start, reach)
		} else if reachIdx >= 0 && s.start > reach {
			a.checkGap(reach, s.start, &a.Entries[reachIdx], &gapBudget)
		}
		if s.end > reach || reachIdx < 0 {
			reach, reachIdx = s.end, s.i
		}
		if s.start < a.CDOffset+a.CDSize && s.end > a.CDOffset {
			a.anomaly("record %q (bytes %d..%d) overlaps the central directory (%d..%d)", e.Name, s.start, s.end, a.CDOffset, a.CDOffset+a.CDSize)
		}
	}
	if reachIdx >= 0 && reach < a.CDOffset {
		a.checkGap(reach, a.CDOffset, &a.Entries[reachIdx], &gapBudget)
	}
}

// checkLocalFields compares a local header's method, flags, CRC and sizes
// with the central directory's (sizes and CRC only when the local header
// carries them, i.e. without a data descriptor).
func (a *Archive) checkLocalFields(e *Entry, hdr, extra []byte) {
	method := binary.LittleEndian.Uint16(hdr[8:])
	flags := binary.LittleEndian.Uint16(hdr[6:])
	if method != e.Method {
		a.anomaly("record %q: the local header says method %d, the central directory %d", e.Name, method, e.Method)
	}
	if flags&flagDescriptor != 0 {
		return
	}
	crc := binary.LittleEndian.Uint32(hdr[14:])
	le := Entry{CompSize: uint64(binary.LittleEndian.Uint32(hdr[18:])), Size: uint64(binary.LittleEndian.Uint32(hdr[22:])), HeaderOffset: 0}
	if le.CompSize == 0xffffffff || le.Size == 0xffffffff {
		if !hasExtra(extra, 0x0001) {
			return // sizes left to the directory, as with a data descriptor
		}
		if err := applyZip64Extra(&le, extra); err != nil {
			a.anomaly("record %q: the local header's zip64 field is malformed: %v", e.Name, err)
			return
		}
	}
	if le.CompSize != e.CompSize || le.Size != e.Size || crc != e.CRC32 {
		a.anomaly("record %q: the local header says %d bytes (%d compressed, CRC %08x), the central directory %d (%d, CRC %08x): torch reads the directory's",
			e.Name, le.Size, le.CompSize, crc, e.Size, e.CompSize, e.CRC32)
	}
}

func hasExtra(extra []byte, id uint16) bool {
	for len(extra) >= 4 {
		n := int(binary.LittleEndian.Uint16(extra[2:]))
		if binary.LittleEndian.Uint16(extra) == id {
			return true
		}
		if len(extra) < 4+n {
			return false
		}
		extra = extra[4+n:]
	}
	return false
}

// checkGap looks at bytes between the end of one record's data and the next
// record: a data descriptor is expected there, another local header is not.
func (a *Archive) checkGap(from, to int64, prev *Entry, budget *int64) {
	n := to - from
	if prev != nil && prev.Flags&flagDescriptor != 0 && n <= 24 && n >= 12 {
		var d [24]byte
		if _, err := a.r.ReadAt(d[:n], from); err == nil {
			b := d[:n]
			if binary.LittleEndian.Uint32(b) == sigDescriptor {
				b = b[4:]
			}
			if len(b) >= 4 && binary.LittleEndian.Uint32(b) == prev.CRC32 && (len(b) == 12 || len(b) == 20) {
				return
			}
		}
	}
	if n > *budget {
		n = *budget
	}
	if n <= 0 {
		return
	}
	*budget -= n
	buf := make([]byte, n)
	k, _ := a.r.ReadAt(buf, from)
	if i := bytes.Index(buf[:k], []byte("PK\x03\x04")); i >= 0 {
		a.anomaly("the bytes %d..%d, in no record, hold a local header (at %d) that is not in the central directory", from, to, from+int64(i))
	}
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
	return n, err
}

// Inflated is how many bytes reads of deflated records have inflated so far.
func (a *Archive) Inflated() int64 { return a.inflated }

// InflateBudget is how many bytes this archive's deflated records may
// inflate in all.
func (a *Archive) InflateBudget() int64 { return a.budget }

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
