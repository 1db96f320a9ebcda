package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// del as a file's content in a mutation removes the file.
const del = "\x00delete"

func writeFile(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, name)
	if content == del {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		return
	}
	if filepath.Base(name) == "cmdline" {
		content = strings.ReplaceAll(strings.TrimRight(content, "\n"), "^@", "\x00")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// baseOptions are the command-line choices each fixture is examined with.
var baseOptions = map[string]Options{
	"baremetal": {Python: "/home/ana/proj/.venv/bin/python", Dir: "/data/ckpt", Keep: 3},
	"container": {Python: "/usr/local/bin/python", Dir: "/workspace/ckpt", Keep: 3},
}

// scenario is a fixture tree plus changes to it.
type scenario struct {
	base  string
	files map[string]string
	fx    func(*Fixture)
	opts  func(*Options)
}

func (s scenario) run(t *testing.T) *Report {
	t.Helper()
	root := t.TempDir()
	if err := ExtractTxtar(filepath.Join("testdata", s.base+".txtar"), root); err != nil {
		t.Fatal(err)
	}
	for name, content := range s.files {
		writeFile(t, root, name, content)
	}
	fx, err := LoadFixture(root)
	if err != nil {
		t.Fatal(err)
	}
	if s.fx != nil {
		s.fx(fx)
	}
	opts := baseOptions[s.base]
	if s.opts != nil {
		s.opts(&opts)
	}
	return Run(context.Background(), fx.Build(root), opts)
}
