package ziparc

import (
	"archive/zip"
	"bytes"
	"errors"
	"strings"
	"testing"
)

func build(t *testing.T, method uint16, recs map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range []string{"a/data.pkl", "a/data/0", "a/version"} {
		data, ok := recs[name]
		if !ok {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(data))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestOpenAndRead(t *testing.T) {
	recs := map[string]string{"a/data.pkl": "pickle bytes", "a/data/0": strings.Repeat("x", 1000), "a/version": "3\n"}
	for _, method := range []uint16{zip.Store, zip.Deflate} {
		b := build(t, method, recs)
		a, err := Open(bytes.NewReader(b), int64(len(b)), DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Entries) != 3 {
			t.Fatalf("%d entries", len(a.Entries))
		}
		for name, want := range recs {
			e, ok := a.Lookup(name)
			if !ok {
				t.Fatalf("%s missing", name)
			}
			got, err := a.ReadSmall(e, 1<<20)
			if err != nil || string(got) != want {
				t.Fatalf("%s: %q %v", name, got, err)
			}
			if err := a.CheckCRC(e, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		if name, ok := FirstLocalName(bytes.NewReader(b)); !ok || name != "a/data.pkl" {
			t.Errorf("FirstLocalName = %q %v", name, ok)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	good := build(t, zip.Store, map[string]string{"a/data.pkl": "p", "a/data/0": strings.Repeat("y", 100)})
	flipped := append([]byte(nil), good...)
	flipped[bytes.Index(flipped, []byte("yyyy"))] = 'z'
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no zip end"},
		{"torn", good[:len(good)-30], ""},
		{"not zip", []byte(strings.Repeat("hello ", 20)), "no zip end"},
		{"cd offset past end", func() []byte {
			b := append([]byte(nil), good...)
			i := bytes.LastIndex(b, []byte("PK\x05\x06"))
			b[i+16], b[i+17], b[i+18], b[i+19] = 0xff, 0xff, 0xff, 0x0f
			return b
		}(), "runs past"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(bytes.NewReader(tc.data), int64(len(tc.data)), DefaultLimits)
			if err == nil {
				t.Fatal("want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
	a, err := Open(bytes.NewReader(flipped), int64(len(flipped)), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := a.Lookup("a/data/0")
	if err := a.CheckCRC(e, nil, nil); err == nil || !strings.Contains(err.Error(), "CRC-32") {
		t.Errorf("CheckCRC on a flipped record: %v", err)
	}
	if _, err := Open(bytes.NewReader(nil), 0, DefaultLimits); !errors.Is(err, ErrNotZip) {
		t.Errorf("empty: %v is not ErrNotZip", err)
	}
	if _, err := Open(bytes.NewReader(good), int64(len(good)), Limits{MaxEntries: 1, MaxCentralBytes: 1 << 20}); err == nil {
		t.Error("entry limit not enforced")
	}
}
