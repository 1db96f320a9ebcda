package ckpt

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
	"github.com/vramguard/vramguard/internal/pickle"
)

// Zip findings are reported as dangerous hits with this global and opcode,
// so that `ckpt scan` fails on them and names them.
// FormatZip is a zip that is neither a torch checkpoint nor an npz, as
// ckpt scan names it.
const FormatZip = "zip"

const (
	zipFindingGlobal = "zip archive"
	zipFindingOpcode = "ZIP"
)

// bombRatio and bombMinSize: a deflated record that inflates more than
// bombRatio times its compressed size to at least bombMinSize bytes is
// reported (torch.load allocates and inflates all of it).
const (
	bombRatio   = 100
	bombMinSize = 64 << 20
)

func zipFinding(res *ScanResult, record string, offset int64, format string, args ...any) {
	res.Hits = append(res.Hits, ScanHit{Global: zipFindingGlobal, Verdict: VerdictDangerous,
		Reason: fmt.Sprintf(format, args...), Record: record, Offset: offset, Opcode: zipFindingOpcode})
}

// scanZipArchive scans a zip the way torch.load reads it (see package
// ziparc): every record torch could unpickle is decoded from the bytes
// torch would take for it, deflated records are inflated as the decoder
// reads them (never held whole, and within the archive's inflate budget),
// and records sharing the same bytes are decoded once. Every anomaly of the
// archive (torch's view and a strict view differ), every record that cannot
// be read, every pickle record over the decoder's cap and every deflate
// bomb is a dangerous finding.
func scanZipArchive(r io.ReaderAt, size int64, res *ScanResult) {
	a, err := ziparc.Open(r, size, ziparc.DefaultLimits)
	if err != nil {
		if errors.Is(err, ziparc.ErrLimit) {
			zipFinding(res, "zip structure", 0, "the archive is over the scanner's limits, its records are not scanned (torch may still load it): %v", err)
		}
		// torch cannot read an archive that Open refuses for any other
		// reason (the same rules as its reader). A torn archive's first
		// record (data.pkl, torch writes it first) is still scanned from
		// its local header.
		res.Errors = append(res.Errors, fmt.Sprintf("zip: %v; scanning the first record from its local header", err))
		name, ok := ziparc.FirstLocalName(r)
		if !ok {
			return
		}
		var h [30]byte
		if _, err := r.ReadAt(h[:], 0); err != nil {
			return
		}
		xl := int64(h[28]) | int64(h[29])<<8
		scanPickles(r, 30+int64(len(name))+xl, size, name, res, false)
		return
	}
	if res.Format == "" {
		// Understood as a zip; an .npy member below makes it an npz.
		defer func() {
			if res.Format == "" {
				res.Format = FormatZip
			}
		}()
	}
	for _, an := range a.Anomalies() {
		zipFinding(res, "zip structure", 0, "torch and other zip readers see this archive differently: %s", an)
	}
	type rng struct {
		off        int64
		comp, size uint64
		method     uint16
	}
	done, bombs := map[rng]bool{}, map[rng]bool{}
	for i := range a.Entries {
		e := &a.Entries[i]
		key := rng{e.DataOff, e.CompSize, e.Size, e.Method}
		if e.Method == 8 && e.Size >= bombMinSize && e.Size/bombRatio > e.CompSize && !bombs[key] {
			bombs[key] = true
			zipFinding(res, e.Name, int64(e.HeaderOffset), "record %q inflates from %d to %d bytes (%d:1): a deflate bomb; torch.load allocates and inflates all of it",
				e.Name, e.CompSize, e.Size, e.Size/max(e.CompSize, 1))
		}
		if e.Encrypted() {
			res.notUnderstood(e.Name, "encrypted (a password-protected zip): nothing of it can be read without the password, so it is not scanned (torch's zip reader refuses encrypted records)")
			continue
		}
		if e.ReadErr != nil {
			zipFinding(res, e.Name, int64(e.HeaderOffset), "record %q cannot be read as torch would read it, so it is not scanned: %v", e.Name, e.ReadErr)
			continue
		}
		if e.Size == 0 || isStorageRecord(e.Name) {
			continue
		}
		if done[key] {
			continue // the same bytes: decoded once, the overlap is an anomaly above
		}
		done[key] = true
		rec, err := a.Open(e)
		if err != nil {
			zipFinding(res, e.Name, int64(e.HeaderOffset), "record %q cannot be read, so it is not scanned: %v", e.Name, err)
			continue
		}
		if !strings.HasSuffix(strings.ToLower(e.Name), ".pkl") {
			// numpy.load of a zip reads every member that starts with
			// its magic as a .npy (NpzFile.__getitem__), whatever the
			// name.
			var m [6]byte
			if n, _ := rec.ReadAt(m[:], 0); n == 6 && string(m[:]) == npyMagic {
				if res.Format == "" {
					res.Format = FormatNpz
				}
				scanNpy(rec, int64(e.Size), e.Name, res)
				if err := rec.Err(); err != nil {
					zipFinding(res, e.Name, int64(e.HeaderOffset), "record %q could not be read to its end, so it is not fully scanned: %v", e.Name, err)
				}
				rec.Close()
				continue
			}
			// Other records are pickles when they start with PROTO 2-5.
			var b [2]byte
			if n, _ := rec.ReadAt(b[:], 0); n < 2 || b[0] != 0x80 || b[1] < 2 || b[1] > 5 {
				if err := rec.Err(); err != nil {
					zipFinding(res, e.Name, int64(e.HeaderOffset), "record %q cannot be read: %v", e.Name, err)
				}
				rec.Close()
				continue
			}
		}
		if e.Size > uint64(pickle.DefaultLimits.MaxBytes) {
			zipFinding(res, e.Name, int64(e.HeaderOffset), "pickle record %q is %d bytes, over the scanner's %d-byte cap: what lies past the cap is not scanned",
				e.Name, e.Size, pickle.DefaultLimits.MaxBytes)
		}
		scanPickles(rec, 0, int64(e.Size), e.Name, res, false)
		if err := rec.Err(); err != nil {
			zipFinding(res, e.Name, int64(e.HeaderOffset), "pickle record %q could not be read to its end, so it is not fully scanned: %v", e.Name, err)
		}
		rec.Close()
	}
}

// isStorageRecord reports whether a record name is a storage (<root>/data/N,
// <root>/.data/...), whose bytes torch never unpickles. torch looks names
// up ignoring ASCII case.
func isStorageRecord(name string) bool {
	i := strings.IndexByte(name, '/')
	if i <= 0 {
		return false
	}
	rest := strings.ToLower(name[i+1:])
	return strings.HasPrefix(rest, "data/") && !strings.HasSuffix(rest, ".pkl")
}
