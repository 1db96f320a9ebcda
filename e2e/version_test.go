package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionStamp builds vramguard as a release build stamps it (the
// variable scripts/dist.sh sets with -ldflags -X) and checks that `version
// --json` reports that version and the revision of this checkout.
func TestVersionStamp(t *testing.T) {
	t.Parallel()
	exe := filepath.Join(t.TempDir(), "vramguard")
	build := exec.Command("go", "build", "-o", exe, "-buildvcs=auto",
		"-ldflags", "-X github.com/vramguard/vramguard/internal/cli.Version=v0.0.0-e2e",
		"github.com/vramguard/vramguard/cmd/vramguard")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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
	if v.Version != "v0.0.0-e2e" || v.Module != "github.com/vramguard/vramguard" {
		t.Errorf("version %q module %q, want v0.0.0-e2e of github.com/vramguard/vramguard", v.Version, v.Module)
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
	if short, _ := exec.Command(exe, "--version").Output(); !strings.HasPrefix(string(short), "vramguard version v0.0.0-e2e") {
		t.Errorf("--version: %q", short)
	}
}
