package supervise

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// torchrun's error file, as torch.distributed.elastic's @record writes it
// (ErrorHandler.record_exception), and the older form whose message is a
// string.
func TestReadErrorFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return testbin.WriteFile(t, dir, name, body, 0o644) }
	p := write("error.json", `{"message": {"message": "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  ...", "timestamp": "1764589000"}}}`)
	r := readErrorFile(p)
	if r == nil || r.Text != "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" || r.T.IsZero() || !strings.Contains(r.From, p) {
		t.Errorf("%+v", r)
	}
	if r := readErrorFile(write("old.json", `{"message": "ValueError: bad"}`)); r == nil || r.Text != "ValueError: bad" {
		t.Errorf("string message: %+v", r)
	}
	for _, body := range []string{"", "{", `{"message": {}}`, `{"other": 1}`} {
		if r := readErrorFile(write("bad.json", body)); r != nil {
			t.Errorf("%q: %+v", body, r)
		}
	}
	if r := readErrorFile(filepath.Join(dir, "missing.json")); r != nil {
		t.Errorf("missing: %+v", r)
	}
}
