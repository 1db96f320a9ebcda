package joblog

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// TestTail: the post-mortem's tail, read back from the log, keeps each
// stream's unfinished line apart, ends lines at a carriage return, and holds
// only the end of a long output.
func TestTail(t *testing.T) {
	lw, err := Create(filepath.Join(t.TempDir(), "t.log"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Close()
	lw.Write('o', []byte("a\nb\nc"), false)
	lw.Write('e', []byte("E1\n"), false)
	lw.Note("a note of vramguard's")
	lw.Write('o', []byte("d\ne\n"), false)
	if got := strings.Join(lw.Tail(3), ","); got != "E1,cd,e" {
		t.Errorf("tail = %q, want E1,cd,e", got)
	}
	lw.Write('o', []byte("50% done\r100% done\n"), true)
	if got := strings.Join(lw.Tail(2), ","); got != "50% done,100% done" {
		t.Errorf("tail = %q", got)
	}
	// 40 MiB of numbered lines: the tail is the last lines, exactly.
	line := bytes.Repeat([]byte("."), 90)
	var chunk []byte
	for i := 0; i < 400000; i++ {
		chunk = append(chunk, fmt.Sprintf("%07d ", i)...)
		chunk = append(chunk, line...)
		chunk = append(chunk, '\n')
		if len(chunk) > 60000 {
			lw.Write('o', chunk, false)
			chunk = chunk[:0]
		}
	}
	lw.Write('o', chunk, false)
	got := lw.Tail(200)
	if len(got) != 200 || !strings.HasPrefix(got[0], "0399800 ") || !strings.HasPrefix(got[199], "0399999 ") {
		t.Errorf("tail of 400000 lines: %d lines, first %.10q, last %.10q", len(got), got[0], got[len(got)-1])
	}
	if len(lw.marks) > 64 {
		t.Errorf("writer keeps %d record marks for a 1 MiB tail of 64 KiB chunks", len(lw.marks))
	}
}

// TestOldLogsStillRead: a log written one record per line (before chunk
// records) decodes as before, and a log that mixes both forms too.
func TestOldLogsStillRead(t *testing.T) {
	old := "2026-11-29T17:38:57.123456Z o| line 1\n" +
		"2026-11-29T17:38:57.223456Z o+ half \n" +
		"2026-11-29T17:38:57.323456Z e| an error\n" +
		"2026-11-29T17:38:57.423456Z o| and half\n" +
		"2026-11-29T17:38:58.000000Z v| vramguard: restarting\n" +
		"2026-11-29T17:38:58.100000Z o# 11\nnew\nrecord\n\n"
	var got bytes.Buffer
	if err := Decode(strings.NewReader(old), &got, Options{}); err != nil {
		t.Fatal(err)
	}
	if want := "line 1\nan error\nhalf and half\nnew\nrecord\n"; got.String() != want {
		t.Errorf("got %q, want %q", got.String(), want)
	}
	got.Reset()
	Decode(strings.NewReader(old), &got, Options{Streams: "v", Timestamps: true})
	if !strings.HasSuffix(got.String(), " vramguard: restarting\n") {
		t.Errorf("notes = %q", got.String())
	}
}

// TestChunkRecordsCostLess: output is stamped once per chunk, so the log
// of 100-byte lines is barely larger than the output (it was 1.32x with a
// stamp per line).
func TestChunkRecordsCostLess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	lw, _ := Create(path, nil)
	line := []byte("epoch 1 step 123 loss 0.123456 lr 0.0003 grad_norm 1.2345 tokens/s 12345.6 ......................\n")
	chunk := bytes.Repeat(line, 80) // one 8 KB read
	for i := 0; i < 100; i++ {
		lw.Write('o', chunk, true)
	}
	lw.Close()
	st, _ := os.Stat(path)
	out := int64(100 * len(chunk))
	if ratio := float64(st.Size()) / float64(out); ratio > 1.01 {
		t.Errorf("log is %.3fx the output", ratio)
	}
}

func TestMalformed(t *testing.T) {
	for _, log := range []string{
		"garbage line\n",
		"2026-11-29T17:38:57.123456Z o# 99999999999\nx\n", // a count beyond the bound
		"2026-11-29T17:38:57.123456Z o# 3\nabcd\n",        // not followed by a newline
		"2026-11-29T17:38:57.123456Z o# -1\n\n",           // negative
		"2026-11-29T17:38:57.123456Z o? what\n",           // unknown flag
	} {
		if err := Decode(strings.NewReader(log), &bytes.Buffer{}, Options{}); err == nil {
			t.Errorf("%q decoded without error", log)
		}
	}
}

func BenchmarkCopy(b *testing.B) {
	line := []byte("epoch 1 step 123 loss 0.123456 lr 0.0003 grad_norm 1.2345 tokens/s 12345.6 ......................\n")
	chunk := bytes.Repeat(line, (64<<10)/len(line))
	path := filepath.Join(b.TempDir(), "b.log")
	lw, _ := Create(path, nil)
	defer lw.Close()
	b.SetBytes(int64(len(chunk)))
	for i := 0; i < b.N; i++ {
		lw.Write('o', chunk, false)
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

// TestFollowChunkWrittenInPieces: a follower that catches a chunk record
// half written waits for the rest instead of failing or losing bytes.
func TestFollowChunkWrittenInPieces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.log")
	lw, _ := Create(path, nil)
	lw.Write('o', []byte("first\n"), true)
	var rec []byte
	rec = appendRecords(rec, time.Now(), 'o', []byte("second line\nthird "))
	rec = appendRecords(rec, time.Now(), 'o', []byte("line\n"))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan struct{})
	var out bytes.Buffer // read once the follower has returned
	var finished atomic.Bool
	go func() {
		defer close(done)
		if err := Follow(path, &out, Options{}, 5*time.Millisecond, finished.Load, nil); err != nil {
			t.Error(err)
		}
	}()
	for i := 0; i < len(rec); i += 7 { // the header and body arrive in pieces
		end := min(i+7, len(rec))
		f.Write(rec[i:end])
		time.Sleep(2 * time.Millisecond)
	}
	finished.Store(true)
	<-done
	if got, want := out.String(), "first\nsecond line\nthird line\n"; got != want {
		t.Errorf("followed %q, want %q", got, want)
	}
}

// TestTailWhileDiskFull: output the log could not hold still reaches the
// post-mortem's tail, after what the log did hold.
func TestTailWhileDiskFull(t *testing.T) {
	lw, err := Create("/dev/full", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Close()
	lw.Write('o', []byte("lost 1\nlost "), true)
	lw.Write('e', []byte("CUDA out of memory\n"), true)
	lw.Write('o', []byte("2\n"), true)
	if got := strings.Join(lw.Tail(10), ","); got != "lost 1,CUDA out of memory,lost 2" {
		t.Errorf("tail = %q", got)
	}
}
