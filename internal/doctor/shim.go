package doctor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
)

// ResolvePyenvShim turns a pyenv shim (a bash script that runs `pyenv exec`,
// which costs from a third of a second to seconds on a busy machine) into the
// interpreter it would run, following pyenv's own order: $PYENV_VERSION, a
// .python-version in cwd or its parents, then $PYENV_ROOT/version. It returns
// p unchanged when p is not a shim or the version is "system" or unknown.
// Paths are on the live filesystem.
func ResolvePyenvShim(p, cwd string, getenv func(string) string) string {
	dir := filepath.Dir(p)
	if filepath.Base(dir) != "shims" {
		return p
	}
	b, err := os.ReadFile(p)
	if err != nil || len(b) > 4096 || !bytes.Contains(b, []byte("pyenv")) {
		return p
	}
	root := filepath.Dir(dir)
	// The shim names its PYENV_ROOT; plugins keep shims elsewhere.
	if _, after, ok := bytes.Cut(b, []byte(`export PYENV_ROOT="`)); ok {
		if r, _, ok := bytes.Cut(after, []byte(`"`)); ok && len(r) > 0 {
			root = string(r)
		}
	}
	var versions []string
	if getenv != nil && getenv("PYENV_VERSION") != "" {
		versions = strings.Split(getenv("PYENV_VERSION"), ":")
	} else {
		file := ""
		for d := cwd; d != ""; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, ".python-version")); err == nil {
				file = filepath.Join(d, ".python-version")
				break
			}
			if d == "/" || d == "." {
				break
			}
		}
		if file == "" {
			file = filepath.Join(root, "version")
		}
		vb, err := os.ReadFile(file)
		if err != nil {
			return p
		}
		versions = strings.Fields(string(vb))
	}
	for _, v := range versions {
		if v == "system" || v == "" {
			return p
		}
		exe := filepath.Join(root, "versions", v, "bin", filepath.Base(p))
		if st, err := os.Stat(exe); err == nil && st.Mode()&0o111 != 0 {
			return exe
		}
	}
	return p
}
