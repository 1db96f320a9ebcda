package cli

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestKernelRunNamedAfterNotebook: the run of a kernel is named after the
// notebook jupyter_server gives the kernel (JPY_SESSION_NAME), not after the
// kernelspec's display name, which the kernelspec passes as --name; a
// kernel without a notebook keeps that name.
func TestKernelRunNamedAfterNotebook(t *testing.T) {
	for _, tt := range []struct {
		session, want string
	}{
		{"sub/analysis.ipynb", "analysis.ipynb"},
		{"", "Python 3 (vramguard)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("JPY_SESSION_NAME", tt.session)
			conn := filepath.Join(t.TempDir(), "kernel-0b5e1c2d-1111-2222-3333-444455556666.json")
			_, errOut, code := runIn(t, home, "run", "--kernel", "--name", "Python 3 (vramguard)", "--gpu-backend", "none", "--no-probe",
				"--", "/bin/sh", "-c", "exit 0", "-f", conn)
			if code != 0 {
				t.Fatalf("run --kernel: exit %d: %s", code, errOut)
			}
			out, _, _ := runIn(t, home, "runs", "--json")
			var runs []struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal([]byte(out), &runs); err != nil || len(runs) != 1 {
				t.Fatalf("runs --json: %v\n%s", err, out)
			}
			if runs[0].Name != tt.want {
				t.Errorf("the kernel's run is named %q, want %q", runs[0].Name, tt.want)
			}
		})
	}
}
