// The local headers read as torch's reader reads them, and the anomalies: each place
// where a stricter or streaming zip reader would see the archive otherwise.

package ziparc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
)

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
