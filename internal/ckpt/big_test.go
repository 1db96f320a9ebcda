package ckpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// statePickle writes a protocol-2 pickle of an OrderedDict of float32
// tensors, the way torch.save writes a state_dict: one storage per tensor.
func statePickle(n int, rows, cols int64) []byte {
	var b bytes.Buffer
	i32 := func(v int64) { b.WriteByte('J'); binary.Write(&b, binary.LittleEndian, int32(v)) }
	str := func(s string) {
		b.WriteByte('X')
		binary.Write(&b, binary.LittleEndian, uint32(len(s)))
		b.WriteString(s)
	}
	b.WriteString("\x80\x02ccollections\nOrderedDict\n)R(")
	for i := 0; i < n; i++ {
		str(fmt.Sprintf("layers.%d.weight", i))
		b.WriteString("ctorch._utils\n_rebuild_tensor_v2\n(")
		b.WriteString("(")
		str("storage")
		b.WriteString("ctorch\nFloatStorage\n")
		str(fmt.Sprint(i))
		str("cpu")
		i32(rows * cols)
		b.WriteString("tQ")
		b.WriteString("K\x00")
		i32(rows)
		i32(cols)
		b.WriteString("\x86")
		i32(cols)
		b.WriteString("K\x01\x86\x89ccollections\nOrderedDict\n)RtR")
	}
	b.WriteString("u.")
	return b.Bytes()
}

// writeSparseTorchZip writes a torch-style zip64 archive of n float32
// tensors of rows×cols, leaving the tensor bytes as holes in the file.
func writeSparseTorchZip(t testing.TB, path string, n int, rows, cols int64) int64 {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type rec struct {
		name     string
		off, len int64
	}
	var recs []rec
	var pos int64
	le := binary.LittleEndian
	// put writes each of vs little-endian, in turn
	put := func(b *bytes.Buffer, vs ...any) {
		for _, v := range vs {
			binary.Write(b, le, v)
		}
	}
	writeRecord := func(name string, data []byte, size int64) {
		// 64-byte aligned data, as torch writes it, via an extra field.
		hdr := 30 + int64(len(name)) + 4
		pad := (64 - (pos+hdr)%64) % 64
		var h bytes.Buffer
		// local header: signature, version, flags, method, time and date,
		// crc (not checked here), zip64's sizes, name and extra lengths
		put(&h, uint32(0x04034b50), uint16(45), uint16(0), uint16(0), uint32(0),
			uint32(0), uint32(0xffffffff), uint32(0xffffffff), uint16(len(name)), uint16(4+pad))
		h.WriteString(name)
		put(&h, uint16(0x4646), uint16(pad)) // "FF", torch's padding id, and its length
		h.Write(make([]byte, pad))
		if _, err := f.WriteAt(h.Bytes(), pos); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{name, pos, size})
		pos += int64(h.Len())
		if data != nil {
			f.WriteAt(data, pos)
		}
		pos += size
	}
	pkl := statePickle(n, rows, cols)
	writeRecord("big/data.pkl", pkl, int64(len(pkl)))
	for i := 0; i < n; i++ {
		writeRecord(fmt.Sprintf("big/data/%d", i), nil, rows*cols*4)
	}
	writeRecord("big/version", []byte("3\n"), 2)
	cdStart := pos
	var cd bytes.Buffer
	for _, r := range recs {
		// central directory header: signature, versions, flags, method,
		// time and date, crc, zip64's sizes, name, extra and comment
		// lengths, disk, attributes, zip64's offset
		put(&cd, uint32(0x02014b50), uint16(45), uint16(45), uint16(0), uint16(0),
			uint32(0), uint32(0), uint32(0xffffffff), uint32(0xffffffff),
			uint16(len(r.name)), uint16(28), uint16(0), uint16(0), uint16(0), uint32(0), uint32(0xffffffff))
		cd.WriteString(r.name)
		put(&cd, uint16(1), uint16(24), uint64(r.len), uint64(r.len), uint64(r.off)) // zip64 extra field
	}
	eocd64 := cdStart + int64(cd.Len())
	// zip64 end of central directory record and locator, then the end of
	// central directory record (its counts and offsets in the zip64 one)
	put(&cd, uint32(0x06064b50), uint64(44), uint16(45), uint16(45), uint32(0), uint32(0),
		uint64(len(recs)), uint64(len(recs)), uint64(eocd64-cdStart), uint64(cdStart))
	put(&cd, uint32(0x07064b50), uint32(0), uint64(eocd64), uint32(1))
	put(&cd, uint32(0x06054b50))
	cd.Write(bytes.Repeat([]byte{0xff}, 8))
	cd.Write(bytes.Repeat([]byte{0xff}, 8))
	put(&cd, uint16(0))
	if _, err := f.WriteAt(cd.Bytes(), cdStart); err != nil {
		t.Fatal(err)
	}
	return cdStart + int64(cd.Len())
}

// TestInspect1GiBReadsUnderOnePercent: inspecting a 1 GiB checkpoint (64
// tensors of 16 MiB, zip64, sparse on disk) reads under 1% of its bytes.
func TestInspect1GiBReadsUnderOnePercent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.pt")
	size := writeSparseTorchZip(t, p, 64, 4096, 1024)
	if size < 1<<30 {
		t.Fatalf("file is %d bytes", size)
	}
	rep, err := Inspect(p, Options{Structure: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Valid {
		t.Fatalf("invalid: %s", rep.Reason)
	}
	if len(rep.Tensors) != 64 || rep.StorageBytes != 64*4096*1024*4 {
		t.Fatalf("%d tensors, %d storage bytes", len(rep.Tensors), rep.StorageBytes)
	}
	if rep.BytesRead*100 >= size {
		t.Fatalf("read %d of %d bytes (%.3f%%)", rep.BytesRead, size, 100*float64(rep.BytesRead)/float64(size))
	}
	t.Logf("read %d of %d bytes (%.4f%%)", rep.BytesRead, size, 100*float64(rep.BytesRead)/float64(size))
}

func BenchmarkInspect1GiB(b *testing.B) {
	p := filepath.Join(b.TempDir(), "big.pt")
	size := writeSparseTorchZip(b, p, 64, 4096, 1024)
	b.ResetTimer()
	var read int64
	for i := 0; i < b.N; i++ {
		rep, err := Inspect(p, Options{Structure: true})
		if err != nil || !rep.Valid {
			b.Fatal(err, rep.Reason)
		}
		read = rep.BytesRead
	}
	b.ReportMetric(float64(read), "bytes-read/op")
	b.ReportMetric(100*float64(read)/float64(size), "%-of-file")
}
