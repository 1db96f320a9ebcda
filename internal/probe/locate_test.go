package probe

import (
	"os"
	"path/filepath"
	"testing"
)

// wheelLayout lays out what pip makes of a vramguard wheel under prefix:
// the binary in bin/ and the probe directory in site, relative to prefix.
func wheelLayout(t *testing.T, prefix, site string) (exe, probeDir string) {
	t.Helper()
	exe = filepath.Join(prefix, "bin", "vramguard")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	probeDir = filepath.Join(prefix, site, PackagedDir)
	for name, b := range Files() {
		p := filepath.Join(probeDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What Python writes next to the files when it imports them.
	pyc := filepath.Join(probeDir, "vramguard", "__pycache__", "_probe.cpython-311.pyc")
	if err := os.MkdirAll(filepath.Dir(pyc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pyc, []byte("bytecode"), 0o644); err != nil {
		t.Fatal(err)
	}
	return exe, probeDir
}

func TestFindUsesTheInstalledPackage(t *testing.T) {
	for _, site := range []string{"lib/python3.11/site-packages", "lib64/python3.12/site-packages", "lib/python3/dist-packages"} {
		t.Run(site, func(t *testing.T) {
			prefix := t.TempDir()
			exe, want := wheelLayout(t, prefix, site)
			state := filepath.Join(t.TempDir(), "probe")
			dir, src, err := Find(exe, state)
			if err != nil || dir != filepath.Clean(want) || src != SourcePackage {
				t.Fatalf("Find = %q %q %v, want the package's %q", dir, src, err, want)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("the state directory got a copy of the probe (%v)", err)
			}
		})
	}
}

func TestFindThroughSymlinkedBinary(t *testing.T) {
	prefix := t.TempDir()
	exe, want := wheelLayout(t, prefix, "lib/python3.11/site-packages")
	link := filepath.Join(t.TempDir(), "vramguard")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	dir, src, err := Find(link, filepath.Join(t.TempDir(), "probe"))
	if err != nil || dir != want || src != SourcePackage {
		t.Fatalf("Find through %s = %q %q %v, want %q", link, dir, src, err, want)
	}
}

func TestFindFallsBackToTheStateDirectory(t *testing.T) {
	edit := func(t *testing.T, probeDir string) {
		p := filepath.Join(probeDir, "vramguard", "_probe.py")
		if err := os.WriteFile(p, []byte("# another version\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(t *testing.T, probeDir string) {
		if err := os.Remove(filepath.Join(probeDir, "sitecustomize.py")); err != nil {
			t.Fatal(err)
		}
	}
	type change struct {
		name   string
		change func(*testing.T, string)
	}
	cases := []change{
		{"other version", edit},
		{"incomplete", remove},
		{"no package", func(t *testing.T, probeDir string) {
			if err := os.RemoveAll(probeDir); err != nil {
				t.Fatal(err)
			}
		}},
		// The directory goes ahead of the standard library on PYTHONPATH:
		// a module added there would shadow it in every job.
		{"module added", func(t *testing.T, probeDir string) {
			if err := os.WriteFile(filepath.Join(probeDir, "json.py"), []byte("raise SystemExit\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"module added to the package", func(t *testing.T, probeDir string) {
			if err := os.WriteFile(filepath.Join(probeDir, "vramguard", "extra.py"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"writable by others", func(t *testing.T, probeDir string) {
			site := filepath.Dir(filepath.Dir(probeDir))
			if err := os.Chmod(site, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
	}
	if os.Getuid() == 0 { // only root can give a file away (CI runs as root)
		cases = append(cases, change{"another user's", func(t *testing.T, probeDir string) {
			if err := os.Chown(filepath.Join(probeDir, "vramguard"), 12345, 12345); err != nil {
				t.Fatal(err)
			}
		}})
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			exe, probeDir := wheelLayout(t, t.TempDir(), "lib/python3.11/site-packages")
			tt.change(t, probeDir)
			state := filepath.Join(t.TempDir(), "probe")
			dir, src, err := Find(exe, state)
			if err != nil || src != SourceState || filepath.Dir(dir) != state {
				t.Fatalf("Find = %q %q %v, want a copy under %s", dir, src, err, state)
			}
			if _, err := os.Stat(filepath.Join(dir, "vramguard", "_probe.py")); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestFindWithoutExecutable(t *testing.T) {
	state := filepath.Join(t.TempDir(), "probe")
	dir, src, err := Find("", state)
	if err != nil || src != SourceState || filepath.Dir(dir) != state {
		t.Fatalf("Find = %q %q %v", dir, src, err)
	}
}

func TestFindAcceptsOwnGroupWritablePackage(t *testing.T) {
	exe, probeDir := wheelLayout(t, t.TempDir(), "lib/python3.11/site-packages")
	if err := os.Chmod(filepath.Join(probeDir, "vramguard"), 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(probeDir, "vramguard"), os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	dir, src, err := Find(exe, filepath.Join(t.TempDir(), "probe"))
	if err != nil || src != SourcePackage || dir != probeDir {
		t.Fatalf("Find = %q %q %v, want the package (group-writable by the user's own group, as umask 002 makes it)", dir, src, err)
	}
}
