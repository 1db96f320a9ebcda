package ziparc

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
)

// rec is one record for mkzip: name in the directory and in the local
// header, content, method.
type rec struct {
	name, local string
	data        []byte
	method      uint16
	attr        uint32
}

// mkzip writes records, then the directory, then the end record, with
// extra bytes appended to the directory (cdTail).
func mkzip(recs []rec, cdTail []byte) []byte {
	var out, cd bytes.Buffer
	le := binary.LittleEndian
	for _, r := range recs {
		comp := r.data
		if r.method == 8 {
			var b bytes.Buffer
			w, _ := flate.NewWriter(&b, 9)
			w.Write(r.data)
			w.Close()
			comp = b.Bytes()
		}
		local := r.local
		if local == "" {
			local = r.name
		}
		off := out.Len()
		crc := crc32.ChecksumIEEE(r.data)
		for _, v := range []any{uint32(sigLocal), uint16(20), uint16(0), r.method, uint32(0), crc, uint32(len(comp)), uint32(len(r.data)), uint16(len(local)), uint16(0)} {
			binary.Write(&out, le, v)
		}
		out.WriteString(local)
		out.Write(comp)
		for _, v := range []any{uint32(sigCentral), uint16(20), uint16(20), uint16(0), r.method, uint32(0), crc, uint32(len(comp)), uint32(len(r.data)),
			uint16(len(r.name)), uint16(0), uint16(0), uint16(0), uint16(0), r.attr, uint32(off)} {
			binary.Write(&cd, le, v)
		}
		cd.WriteString(r.name)
	}
	cd.Write(cdTail)
	cdOff := out.Len()
	out.Write(cd.Bytes())
	for _, v := range []any{uint32(sigEOCD), uint16(0), uint16(0), uint16(len(recs)), uint16(len(recs)), uint32(cd.Len()), uint32(cdOff), uint16(0)} {
		binary.Write(&out, le, v)
	}
	return out.Bytes()
}

func open(t *testing.T, b []byte) *Archive {
	t.Helper()
	a, err := Open(bytes.NewReader(b), int64(len(b)), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func wantAnomaly(t *testing.T, a *Archive, sub string) {
	t.Helper()
	for _, an := range a.Anomalies() {
		if strings.Contains(an, sub) {
			return
		}
	}
	t.Errorf("no anomaly with %q in %q", sub, a.Anomalies())
}

func TestGoZipWriterHasNoAnomalies(t *testing.T) {
	recs := map[string]string{"a/data.pkl": "pickle bytes", "a/data/0": strings.Repeat("x", 1000), "a/version": "3\n"}
	for _, m := range []uint16{zip.Store, zip.Deflate} {
		if an := open(t, build(t, m, recs)).Anomalies(); len(an) > 0 {
			t.Errorf("method %d: %q", m, an)
		}
	}
	if an := open(t, mkzip([]rec{{name: "a/data.pkl", data: []byte("p")}, {name: "a/version", data: []byte("3\n")}}, nil)).Anomalies(); len(an) > 0 {
		t.Errorf("mkzip: %q", an)
	}
}

func TestTorchViewAnomalies(t *testing.T) {
	base := []rec{{name: "a/data.pkl", data: []byte("pickle")}, {name: "a/version", data: []byte("3\n")}}
	t.Run("case", func(t *testing.T) {
		a := open(t, mkzip(append(base, rec{name: "a/DATA.pkl", data: []byte("other")}), nil))
		wantAnomaly(t, a, "differ only in case")
		if e, ok := a.Lookup("A/Data.PKL"); !ok || e.Name != "a/data.pkl" {
			t.Errorf("case-insensitive lookup: %v %v", e, ok)
		}
	})
	t.Run("local name", func(t *testing.T) {
		a := open(t, mkzip([]rec{{name: "a/data.pkl", local: "a/evil.pkl", data: []byte("x")}}, nil))
		wantAnomaly(t, a, `names "a/evil.pkl"`)
		got, err := a.ReadSmall(&a.Entries[0], 100)
		if err != nil || string(got) != "x" {
			t.Errorf("read as torch does: %q %v", got, err)
		}
	})
	t.Run("directory flag", func(t *testing.T) {
		wantAnomaly(t, open(t, mkzip([]rec{{name: "a/data.pkl", data: []byte("x"), attr: 0x10}}, nil)), "marked as a directory")
	})
	t.Run("directory bytes past the records", func(t *testing.T) {
		extra := make([]byte, centralLen+4)
		binary.LittleEndian.PutUint32(extra, sigCentral)
		wantAnomaly(t, open(t, mkzip(base, extra)), "another central record")
	})
	t.Run("duplicate", func(t *testing.T) {
		a := open(t, mkzip(append(base, base[0]), nil))
		wantAnomaly(t, a, "more than once")
		if len(a.Duplicate) != 1 {
			t.Errorf("Duplicate = %q", a.Duplicate)
		}
	})
	t.Run("trailing bytes after the end record", func(t *testing.T) {
		b := append(mkzip(base, nil), "junk"...)
		wantAnomaly(t, open(t, b), "comment bytes follow it")
	})
	t.Run("local header missing", func(t *testing.T) {
		b := mkzip(base, nil)
		v, _ := open(t, b).Lookup("a/version")
		b[v.HeaderOffset+2] = 'X'
		a := open(t, b)
		e, _ := a.Lookup("a/version")
		if e.ReadErr == nil {
			t.Error("no read error for a record without a local header")
		}
		if _, err := a.Open(e); err == nil {
			t.Error("Open of a record without a local header")
		}
	})
}

func TestInflateBudgetAndForwardReads(t *testing.T) {
	zeros := make([]byte, 4<<20)
	b := mkzip([]rec{{name: "a/data.pkl", data: zeros, method: 8}, {name: "a/data/0", data: zeros, method: 8}}, nil)
	a, err := Open(bytes.NewReader(b), int64(len(b)), Limits{MaxInflate: 5 << 20, InflateRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	if an := a.Anomalies(); len(an) > 0 {
		t.Fatal(an)
	}
	if err := a.CheckCRC(&a.Entries[0], nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckCRC(&a.Entries[1], nil, nil); !errors.Is(err, ErrInflateBudget) {
		t.Fatalf("second 4 MiB record within a 5 MiB budget: %v", err)
	}
	// Forward reads: skip ahead without holding what is skipped.
	a = open(t, b)
	r, err := a.Open(&a.Entries[0])
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 10)
	if n, err := r.ReadAt(p, 3<<20); n != 10 || err != nil {
		t.Fatalf("ReadAt far ahead: %d %v", n, err)
	}
	if cap(r.win) > 1<<20 {
		t.Errorf("window grew to %d bytes while skipping", cap(r.win))
	}
	if _, err := r.ReadAt(p, 0); err == nil {
		t.Error("a backward read succeeded")
	}
	if n, err := r.ReadAt(p, 4<<20-5); n != 5 || err != io.EOF {
		t.Errorf("read at the end: %d %v", n, err)
	}
	if a.Inflated() < 4<<20 || a.Inflated() > 5<<20 {
		t.Errorf("inflated %d", a.Inflated())
	}
}

// A deflate stream longer than the directory's size is read up to the size
// and no further; ReadSmall refuses it, as torch's reader does.
func TestRecordStopsAtSize(t *testing.T) {
	b := mkzip([]rec{{name: "a/data.pkl", data: []byte(strings.Repeat("abc", 1000)), method: 8}}, nil)
	a := open(t, b)
	e := &a.Entries[0]
	e.Size = 100 // as if the directory said 100
	r, err := a.Open(e)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 200)
	n, err := r.ReadAt(p, 0)
	if n != 100 || err != io.EOF {
		t.Fatalf("ReadAt = %d, %v; want 100, EOF", n, err)
	}
	if _, err := a.ReadSmall(e, 1000); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("ReadSmall of a longer stream: %v", err)
	}
}
