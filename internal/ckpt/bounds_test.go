package ckpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
)

func writeSafetensors(t *testing.T, p, header string) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	binary.Write(f, binary.LittleEndian, uint64(len(header)))
	f.WriteString(header)
}

// TestCostBoundSafetensorsHeader: the header is streamed (a 100 MiB
// padded header (48 MiB here) allocates a few MiB, measured by the runtime's own
// counter), and a header of more zero-size tensors than the bound, or one
// value over its bound, is refused with the reason. Not parallel: the
// allocation count is the process's.
func TestCostBoundSafetensorsHeader(t *testing.T) {
	dir := t.TempDir()
	one := `{"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`
	padded := filepath.Join(dir, "padded.safetensors")
	writeSafetensors(t, padded, one+strings.Repeat(" ", 48<<20-len(one)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rep, err := Inspect(padded, Options{Structure: true})
	runtime.ReadMemStats(&after)
	if err != nil || !rep.Valid || len(rep.Tensors) != 1 {
		t.Fatalf("padded 48 MiB header: %v %+v", err, rep)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("a 48 MiB header allocated %d MiB: not streamed", alloc>>20)
	}
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i <= maxSafetensorsTensors; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}`, i)
	}
	b.WriteString("}")
	many := filepath.Join(dir, "many.safetensors")
	writeSafetensors(t, many, b.String())
	meta := filepath.Join(dir, "meta.safetensors")
	writeSafetensors(t, meta, `{"__metadata__":{"k":"`+strings.Repeat("x", 2*maxSafetensorsValue)+`"},"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`)
	trailing := filepath.Join(dir, "trailing.safetensors")
	writeSafetensors(t, trailing, one+`  {"x":1}`)
	for _, tc := range []struct{ path, why string }{
		{many, "more than 65536 tensors"},
		{meta, "over the reader's 1048576-byte bound"},
		{trailing, `'{' after its JSON object`},
	} {
		rep, err := Inspect(tc.path, Options{Structure: true})
		if err != nil || rep.Valid || !strings.Contains(rep.Reason, tc.why) {
			t.Errorf("%s: %v valid=%v %q, want invalid with %q", filepath.Base(tc.path), err, rep.Valid, rep.Reason, tc.why)
		}
	}
}

// TestCostBoundSharedContainers: a 1 KB pickle whose dicts each hold the
// one before twice names 2^39 paths; each container is walked once.
func TestCostBoundSharedContainers(t *testing.T) {
	t.Parallel()
	b := []byte("\x80\x02}q\x00X\x01\x00\x00\x00xK\x01s")
	for i := 1; i < 40; i++ {
		b = append(b, fmt.Sprintf("}q%c(X\x01\x00\x00\x00ah%cX\x01\x00\x00\x00bh%cu", i, i-1, i-1)...)
	}
	b = append(b, '.')
	p := filepath.Join(t.TempDir(), "memo.pkl")
	os.WriteFile(p, b, 0o644)
	rep, err := Inspect(p, Options{Structure: true})
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Join(rep.Findings, "; ")
	if strings.Contains(f, "too large") || !strings.Contains(f, "listed once") || len(rep.Scalars) != 1 {
		t.Errorf("findings %q, %d scalars", f, len(rep.Scalars))
	}
}

// TestCostBoundZipRecords: a zip of more records than the bound (a
// million cost 3 s and 457 MB before) is refused from its end record's
// count, before the directory is read.
func TestCostBoundZipRecords(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i := 0; i <= ziparc.DefaultLimits.MaxEntries; i++ {
		if _, err := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("a/x/%d", i), Method: zip.Store}); err != nil {
			t.Fatal(err)
		}
	}
	zw.Close()
	_, err := ziparc.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), ziparc.DefaultLimits)
	if err == nil || !strings.Contains(err.Error(), "over the 131072-record limit") {
		t.Errorf("%d records: %v", ziparc.DefaultLimits.MaxEntries+1, err)
	}
}

// TestCostBoundTrainerState: a sparse 1 GiB trainer_state.json is refused
// by its size, not read.
func TestCostBoundTrainerState(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "checkpoint-1")
	copyDir(t, "testdata/torch/hf/checkpoint-500", dir)
	f, err := os.OpenFile(filepath.Join(dir, "trainer_state.json"), os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"global_step": 1, "log_history": []}`)
	f.Truncate(1 << 30)
	f.Close()
	rep, err := Inspect(dir, Options{Structure: true})
	if err != nil || rep.Valid || !strings.Contains(rep.Reason, "over the 67108864-byte bound") || rep.BytesRead > 1<<20 {
		t.Errorf("%v valid=%v %q read %d", err, rep.Valid, rep.Reason, rep.BytesRead)
	}
}
