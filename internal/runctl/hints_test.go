package runctl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vramguard/vramguard/internal/jupyter"
	"github.com/vramguard/vramguard/internal/testbin"
)

// KernelForConnection names a kernel by its connection file as run
// --kernel records it (jupyter.KernelID of the file's absolute path and
// key), whatever the file is called; a relative path is the kernel's
// process's; a file that is no connection file names no kernel.
func TestKernelForConnection(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return testbin.WriteFile(t, dir, name, body, 0o600) }
	a := write("tmpa1b2.json", `{"key": "k-one", "transport": "tcp", "shell_port": 50001, "ip": "127.0.0.1"}`)
	b := write("tmpc3d4.json", `{"key": "k-two", "transport": "tcp", "shell_port": 50002, "ip": "127.0.0.1"}`)
	write("config.json", `{"lr": 0.1}`)
	want := func(p string) string {
		c, err := jupyter.ReadConnection(p)
		if err != nil {
			t.Fatal(err)
		}
		return jupyter.KernelID(p, &c)
	}
	t.Chdir(dir) // a relative path is this process's
	h := NewHints(t.TempDir(), nil)
	tests := []struct {
		file, id string
		ok       bool
	}{
		{a, want(a), true},
		{b, want(b), true},
		{"tmpa1b2.json", want(a), true},
		{filepath.Join(dir, "config.json"), "", false},
		{filepath.Join(dir, "missing.json"), "", false},
	}
	for _, tt := range tests {
		id, ok := h.KernelForConnection(os.Getpid(), tt.file)
		if id != tt.id || ok != tt.ok {
			t.Errorf("KernelForConnection(%q) = %q, %v; want %q, %v", tt.file, id, ok, tt.id, tt.ok)
		}
	}
	if want(a) == want(b) {
		t.Error("two kernels' files give one id")
	}
	// Remembered: the file's kernel stays the same while the kernel runs,
	// though the file is rewritten (a restart keeps path and key).
	write("tmpa1b2.json", `{"key": "k-one", "transport": "tcp", "shell_port": 50009, "ip": "127.0.0.1"}`)
	if id, _ := h.KernelForConnection(os.Getpid(), a); id != want(a) {
		t.Errorf("after a rewrite: %q, want %q", id, want(a))
	}
}
