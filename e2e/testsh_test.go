package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// fakeDpkg puts a dpkg-query on PATH that reports every package installed
// but missing, and an apt-get that records its arguments in dir/apt.log.
func fakeDpkg(t *testing.T, missing string) (dir, path string) {
	t.Helper()
	// not under t.TempDir(), whose parent only root may enter: the script
	// runs as nobody too
	dir, err := os.MkdirTemp("", "vramguard-fakedpkg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// dpkg-query -W -f='${Status}' PKG
	write("dpkg-query", `for a; do p=$a; done
[ "$p" = "`+missing+`" ] && exit 1
printf 'install ok installed'
`)
	write("apt-get", `echo "$*" >>`+filepath.Join(dir, "apt.log")+"\n")
	return dir, dir + ":" + os.Getenv("PATH")
}

// TestTestScriptStopsInOneLine: without root, a missing package stops
// scripts/test.sh at once with the one apt-get command to run, before any
// test builds.
func TestTestScriptStopsInOneLine(t *testing.T) {
	t.Parallel()
	dir, path := fakeDpkg(t, "python3-torch")
	// a copy of the script and its list where nobody may read them, wherever
	// the checkout is (a clone under a private directory)
	for _, f := range []string{"test.sh", "test-packages.txt"} {
		b, err := os.ReadFile(filepath.Join("..", "scripts", f))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, "tree", "scripts"), 0o755)
		if err := os.WriteFile(filepath.Join(dir, "tree", "scripts", f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "tree", "scripts", "test.sh")
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", script, "--setup")
	} else {
		cmd = exec.Command(script, "--setup")
	}
	cmd.Env = append(os.Environ(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := "install them with: sudo apt-get install --no-install-recommends python3-torch"
	if code != 3 || len(lines) != 1 || !strings.HasSuffix(lines[0], want) {
		t.Fatalf("exit %d, output:\n%s\nwant exit 3 and one line ending %q", code, out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "apt.log")); err == nil {
		t.Error("apt-get ran without root")
	}
}

// TestTestScriptInstallsAsRoot: as root, scripts/test.sh installs exactly
// the missing packages with apt-get.
func TestTestScriptInstallsAsRoot(t *testing.T) {
	testbin.NeedRoot(t, "scripts/test.sh installs packages only as root")
	t.Parallel()
	dir, path := fakeDpkg(t, "tmux")
	cmd := exec.Command("../scripts/test.sh", "--setup")
	cmd.Env = append(os.Environ(), "PATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "apt.log"))
	if got, want := string(b), "update -qq\ninstall -y -qq --no-install-recommends tmux\n"; got != want {
		t.Fatalf("apt-get calls:\n%s\nwant:\n%s", got, want)
	}
}
