package joblog

import (
	"strings"
	"testing"
	"time"
)

// TestWriterFullDevice: writes to a device that is always full (ENOSPC)
// never fail the copier; the loss is counted and said once.
func TestWriterFullDevice(t *testing.T) {
	now := time.Unix(0, 0)
	lw, err := Create("/dev/full", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	lw.SetNotify(func(m string) { notes = append(notes, m) })
	for i := 0; i < 10; i++ {
		if err := lw.Write('o', []byte("line\n"), true); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		now = now.Add(RetryEvery) // each write retries
	}
	if got := lw.Lost(); got != 50 {
		t.Errorf("lost %d bytes, want 50", got)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "logging stopped") || !strings.Contains(notes[0], "no space left") {
		t.Errorf("notes %q, want one that logging stopped", notes)
	}
	if err := lw.Close(); err == nil || !strings.Contains(err.Error(), "misses output") {
		t.Errorf("Close: %v", err)
	}
	if err := lw.Write('o', []byte("x"), true); err == nil {
		t.Error("a write after Close succeeded")
	}
}
