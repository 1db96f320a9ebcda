package cli

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-29T17:38:57Z"}, {Key: "vcs.modified", Value: "true"}}
	tests := []struct {
		name      string
		stamped   string
		bi        *debug.BuildInfo
		version   string
		revision  string
		modified  bool
		shortLine string
	}{
		{"checkout build", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/vramguard/vramguard", Version: "(devel)"}, Settings: vcs},
			"dev", "0123456789abcdef0123456789abcdef01234567", true, "dev (0123456789ab, modified)"},
		{"stamped release", "v1.4.0", &debug.BuildInfo{Main: debug.Module{Path: "github.com/vramguard/vramguard", Version: "(devel)"}, Settings: vcs[:3]},
			"v1.4.0", "0123456789abcdef0123456789abcdef01234567", false, "v1.4.0 (0123456789ab)"},
		{"go install @version", "", &debug.BuildInfo{Main: debug.Module{Path: "github.com/vramguard/vramguard", Version: "v1.3.2"}},
			"v1.3.2", "", false, "v1.3.2"},
		{"no build info", "", nil, "dev", "", false, "dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := buildVersion(tt.stamped, tt.bi)
			if v.Version != tt.version || v.Revision != tt.revision || v.Modified != tt.modified || v.short() != tt.shortLine {
				t.Errorf("got %+v (short %q)", v, v.short())
			}
			if v.Platform != runtime.GOOS+"/"+runtime.GOARCH {
				t.Errorf("platform %q", v.Platform)
			}
		})
	}
}

// TestVersionCommand runs `version`, `version --json` and `--version` with
// Version stamped as -ldflags -X would.
func TestVersionCommand(t *testing.T) {
	old := Version
	Version = "v9.8.7"
	t.Cleanup(func() { Version = old })
	out, errOut, code := runCLI(t, false, "version")
	if code != 0 || !strings.HasPrefix(out, "vramguard v9.8.7\nrevision  ") || !strings.Contains(out, "\ngo        "+runtime.Version()) {
		t.Errorf("version: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runCLI(t, false, "version", "--json")
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 {
		t.Fatalf("version --json: exit %d, %v\n%s", code, err, out)
	}
	for _, k := range []string{"version", "module", "module_version", "revision", "revision_time", "modified", "go", "platform"} {
		if _, ok := v[k]; !ok {
			t.Errorf("version --json lacks %q: %s", k, out)
		}
	}
	if v["version"] != "v9.8.7" {
		t.Errorf("version --json: version %v", v["version"])
	}
	if out, _, _ := runCLI(t, false, "--version"); !strings.HasPrefix(out, "vramguard version v9.8.7") {
		t.Errorf("--version: %q", out)
	}
}
