package joblog

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRoundTrip writes random chunks (binary, partial lines, a 10 MB line)
// through Writer and checks Decode gives back each stream byte for byte.
func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.log")
	lw, err := Create(path, func() time.Time { return time.Unix(1700000000, 123456000) })
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	var want bytes.Buffer
	for i := 0; i < 2000; i++ {
		n := rng.Intn(300)
		chunk := make([]byte, n)
		rng.Read(chunk)
		if i%7 == 0 {
			chunk = append(chunk, '\n')
		}
		want.Write(chunk)
		if err := lw.Write('o', chunk, i%5 == 0); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("x"), 10<<20)
	for off := 0; off < len(big); off += 64 << 10 {
		lw.Write('o', big[off:off+64<<10], false)
	}
	want.Write(big)
	lw.Write('o', []byte("\nend without newline"), false)
	want.WriteString("\nend without newline")
	lw.Write('e', []byte("err line\n"), true)
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	var got bytes.Buffer
	if err := Decode(f, &got, Options{Streams: "o"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("stdout differs: got %d bytes, want %d", got.Len(), want.Len())
	}
	f.Seek(0, 0)
	got.Reset()
	Decode(f, &got, Options{Streams: "e", Timestamps: true})
	if !strings.HasSuffix(got.String(), " err line\n") || !strings.HasPrefix(got.String(), "2023-11-") {
		t.Errorf("stderr with timestamps = %q", got.String())
	}
}

func TestTail(t *testing.T) {
	tl := NewTail(3)
	tl.Add('o', []byte("a\nb\nc"))
	tl.Add('e', []byte("E1\n"))
	tl.Add('o', []byte("d\ne\n"))
	got := strings.Join(tl.Lines(), ",")
	if got != "E1,cd,e" {
		t.Errorf("tail = %q", got)
	}
}

func TestMalformed(t *testing.T) {
	if err := Decode(strings.NewReader("garbage line\n"), &bytes.Buffer{}, Options{}); err == nil {
		t.Error("garbage decoded without error")
	}
}

func BenchmarkCopy(b *testing.B) {
	line := []byte("epoch 1 step 123 loss 0.123456 lr 0.0003 grad_norm 1.2345 tokens/s 12345.6 ......................\n")
	chunk := bytes.Repeat(line, (64<<10)/len(line))
	path := filepath.Join(b.TempDir(), "b.log")
	lw, _ := Create(path, nil)
	defer lw.Close()
	tail := NewTail(200)
	b.SetBytes(int64(len(chunk)))
	for i := 0; i < b.N; i++ {
		lw.Write('o', chunk, false)
		tail.Add('o', chunk)
	}
}

// TestInterleavedStreamsKeepLinesWhole: a stdout line that arrived in two
// pieces with a stderr line between them comes out whole, before or after
// the stderr line, never spliced.
func TestInterleavedStreamsKeepLinesWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "i.log")
	lw, _ := Create(path, nil)
	lw.Write('o', []byte("line 1\nline 2 first half "), false)
	lw.Write('e', []byte("wrote 3 lines\n"), false)
	lw.Write('o', []byte("second half\nline 3\n"), false)
	lw.Write('o', []byte("no newline at the end"), true)
	lw.Close()
	f, _ := os.Open(path)
	defer f.Close()
	var got bytes.Buffer
	if err := Decode(f, &got, Options{}); err != nil {
		t.Fatal(err)
	}
	want := "line 1\nwrote 3 lines\nline 2 first half second half\nline 3\nno newline at the end"
	if got.String() != want {
		t.Errorf("got %q\nwant %q", got.String(), want)
	}
}
