package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPythonPath(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		name string
		args []string
		code int
		want func(t *testing.T, out, errOut string)
	}{
		{"plain", []string{"python-path"}, 0, func(t *testing.T, out, _ string) {
			dir := strings.TrimSpace(out)
			if filepath.Dir(dir) != filepath.Join(home, "probe") {
				t.Errorf("dir %q not under %s/probe", dir, home)
			}
			for _, f := range []string{"sitecustomize.py", "vramguard/__init__.py"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Error(err)
				}
			}
		}},
		{"json", []string{"python-path", "--json"}, 0, func(t *testing.T, out, _ string) {
			var v struct {
				Path     string
				Digest   string
				Protocol int
				Source   string
			}
			// The test binary was not installed from a wheel: the probe is
			// written under the state directory.
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.Protocol != 1 || !strings.HasSuffix(v.Path, "probe-"+v.Digest) || v.Source != "state" {
				t.Errorf("%v %+v", err, v)
			}
		}},
		{"extra arg", []string{"python-path", "x"}, ExitUsage, func(t *testing.T, _, errOut string) {
			if !strings.Contains(errOut, "unknown command") && !strings.Contains(errOut, "accepts 0 arg") {
				t.Errorf("stderr %q", errOut)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			f := &Factory{IO: IOStreams{Out: &out, ErrOut: &errOut}, Now: time.Now, Getenv: func(string) string { return "" }}
			root := NewCmdRoot(f)
			root.SetArgs(append(tc.args, "--home", home))
			code := exitCode(f, root.Execute())
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errOut.String())
			}
			tc.want(t, out.String(), errOut.String())
		})
	}
}
