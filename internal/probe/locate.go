package probe

import (
	"bytes"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// PackagedDir is where a vramguard wheel keeps the probe directory, below
// the site-packages directory it is installed into: the files Files
// returns, byte for byte, laid out as Install lays them out. It is the
// directory `vramguard run` puts on PYTHONPATH when the binary runs from
// that installation, so that no copy is written under the state directory.
const PackagedDir = "vramguard/_pythonpath"

// Source says where the probe directory of Find came from.
type Source string

const (
	// SourcePackage: the probe directory of the Python package installed
	// with this binary (pip install vramguard).
	SourcePackage Source = "package"
	// SourceState: the embedded probe, written under the state directory.
	SourceState Source = "state"
)

// Find returns the probe directory to put on a job's PYTHONPATH. When the
// binary exe was installed by a vramguard wheel (exe is PREFIX/bin/...,
// symlinks resolved), that is the wheel's own PackagedDir below
// PREFIX/lib*/python3*/{site,dist}-packages, provided it holds exactly the
// probe built into this binary; otherwise the embedded probe is written
// under stateDir by Install. exe may be empty (no installation is looked
// for).
func Find(exe, stateDir string) (string, Source, error) {
	if exe != "" {
		if dir, ok := Installed(exe); ok {
			return dir, SourcePackage, nil
		}
	}
	dir, err := Install(stateDir)
	return dir, SourceState, err
}

// Installed returns the probe directory of the vramguard Python package
// installed with the binary exe, if there is one and its files are the
// ones built into this binary. A wheel puts the binary in the scheme's
// scripts directory (PREFIX/bin: a virtual environment, a conda
// environment, ~/.local for pip install --user, /usr/local) and the
// package in its purelib directory (PREFIX/lib/pythonX.Y/site-packages, or
// dist-packages for a Debian Python); it is looked for there only. A
// package of another vramguard version, one whose files were edited or
// added to, or one that another user could change (trusted) is not used.
func Installed(exe string) (string, bool) {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	prefix := filepath.Dir(filepath.Dir(exe))
	var cands []string
	for _, pattern := range []string{"lib*/python3*/site-packages", "lib*/python3*/dist-packages"} {
		m, _ := filepath.Glob(filepath.Join(prefix, pattern, filepath.FromSlash(PackagedDir)))
		cands = append(cands, m...)
	}
	// Several Pythons may share the prefix; any copy that matches will do,
	// and sorting keeps the choice stable.
	slices.Sort(cands)
	for _, dir := range cands {
		if trusted(prefix, dir) && onlyProbeFiles(dir) && sameFiles(dir) {
			return dir, true
		}
	}
	return "", false
}

// trusted reports whether no other user can change what Python finds in
// dir: every directory from prefix down to dir and below it is owned by
// this user or root and is not writable by others, nor by a group other
// than this user's own. The directory goes first on jobs' PYTHONPATH, ahead
// of the standard library, so a module planted there would run in every
// job; an untrusted one is not used (the embedded probe is written under
// the state directory instead).
func trusted(prefix, dir string) bool {
	rel, err := filepath.Rel(prefix, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return false
	}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	ok := func(p string) bool {
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		st, isUnix := fi.Sys().(*syscall.Stat_t)
		if !isUnix || (st.Uid != uid && st.Uid != 0) {
			return false
		}
		perm := fi.Mode().Perm()
		return perm&0o002 == 0 && (perm&0o020 == 0 || st.Gid == gid)
	}
	p := prefix
	if !ok(p) {
		return false
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		if !ok(p) {
			return false
		}
	}
	return ok(filepath.Join(dir, "vramguard"))
}

// onlyProbeFiles reports whether dir holds nothing but the probe's files,
// and the __pycache__ directories Python writes next to them.
func onlyProbeFiles(dir string) bool {
	want := map[string]bool{}
	for name := range Files() {
		for p := name; p != "."; p = path.Dir(p) {
			want[p] = true
		}
	}
	clean := true
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && path.Base(rel) == "__pycache__" && want[path.Dir(rel)+"/__init__.py"] || d.IsDir() && rel == "__pycache__":
			return fs.SkipDir
		case want[rel] && (d.IsDir() || d.Type().IsRegular()):
			return nil
		}
		clean = false
		return fs.SkipAll
	})
	return err == nil && clean
}

// sameFiles reports whether dir holds every embedded probe file with the
// embedded content. Files Python adds (__pycache__) do not matter.
func sameFiles(dir string) bool {
	for name, want := range Files() {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	return true
}
