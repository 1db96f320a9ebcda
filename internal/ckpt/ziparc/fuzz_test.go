package ziparc

import (
	"archive/zip"
	"bytes"
	"testing"
)

func seedZip(names ...string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Store})
		w.Write([]byte("data of " + n))
	}
	zw.Close()
	return buf.Bytes()
}

// FuzzOpen: any input opens or fails with an error; reading records of an
// archive that opened never panics or reads out of bounds.
func FuzzOpen(f *testing.F) {
	f.Add(seedZip("archive/data.pkl", "archive/data/0", "archive/version"))
	f.Add(seedZip())
	f.Add([]byte("PK\x05\x06" + string(make([]byte, 18))))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		a, err := Open(r, int64(len(b)), Limits{MaxEntries: 1000, MaxCentralBytes: 1 << 20})
		FirstLocalName(r)
		if err != nil {
			return
		}
		buf := make([]byte, 4096)
		for i := range a.Entries {
			e := &a.Entries[i]
			if _, err := a.ReadSmall(e, 1<<20); err == nil && e.Size > uint64(len(b)) && e.Method == 0 {
				t.Fatalf("stored record of %d bytes read from a %d-byte input", e.Size, len(b))
			}
			a.CheckCRC(e, buf, nil)
		}
	})
}
