package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestVersionStamp checks that the binary under test, stamped as
// scripts/dist.sh stamps a release (the variable it sets with -ldflags -X;
// testbin.Build stamps testbin.Version), reports that version and the
// revision of this checkout in `version --json`.
func TestVersionStamp(t *testing.T) {
	t.Parallel()
	exe := bin
	out, err := exec.Command(exe, "version", "--json").Output()
	if err != nil {
		t.Fatalf("version --json: %v", err)
	}
	var v struct {
		Version, Module, Revision string
		Modified                  bool
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	if v.Version != testbin.Version || v.Module != "github.com/vramguard/vramguard" {
		t.Errorf("version %q module %q, want %s of github.com/vramguard/vramguard", v.Version, v.Module, testbin.Version)
	}
	// Go records the revision when it builds in a git checkout (one whose
	// .git is a directory: not in a linked worktree, nor sources without
	// .git).
	want := ""
	if top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		if st, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err == nil && st.IsDir() {
			head, err := exec.Command("git", "rev-parse", "HEAD").Output()
			if err != nil {
				t.Fatal(err)
			}
			want = strings.TrimSpace(string(head))
		}
	}
	if v.Revision != want {
		t.Errorf("revision %q, want %q (the checkout's HEAD, or none outside a checkout)", v.Revision, want)
	}
	if short, _ := exec.Command(exe, "--version").Output(); !strings.HasPrefix(string(short), "vramguard version "+testbin.Version) {
		t.Errorf("--version: %q", short)
	}
}
