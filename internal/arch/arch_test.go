// Package arch holds the test that keeps vramguard's imports running the
// one way docs/ARCHITECTURE.md draws: sources → timeline → monitor → sinks.
package arch

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/vramguard/vramguard/internal/"

// deps lists the packages of this module that pkg imports, directly or not.
func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	m := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		if strings.HasPrefix(l, mod) {
			m[strings.TrimPrefix(l, mod)] = true
		}
	}
	return m
}

// TestImportsRunOneWay: the layers below never reach up to the ones that
// use them.
func TestImportsRunOneWay(t *testing.T) {
	tests := []struct {
		pkg       string
		forbidden []string
	}{
		// the agent and the probe know nothing of how a job is supervised,
		// and the agent nothing of the command line
		{"agent", []string{"supervise", "cli"}},
		{"probe", []string{"supervise", "cli", "agent"}},
		// the data model and the policies are pure: no sources, no sinks
		{"timeline", []string{"sampler", "monitor", "store", "procfs", "gpu", "probe", "supervise", "agent", "cli"}},
		{"monitor", []string{"sampler", "store", "procfs", "gpu", "probe", "supervise", "agent", "cli"}},
		{"analyze", []string{"timeline", "monitor", "sampler", "store", "supervise", "agent", "cli"}},
		// the observation layer feeds the sinks, never the reverse
		{"sampler", []string{"supervise", "agent", "cli", "store"}},
		{"postmortem", []string{"supervise", "agent", "cli", "probe"}},
		{"supervise", []string{"agent", "cli"}},
		{"runctl", []string{"supervise", "agent", "cli"}},
		// snapshots are read and computed on, never served or printed there
		{"snapshot", []string{"cli", "agent", "supervise", "probe", "store", "sampler"}},
		// the one pickle reader knows no view: checkpoints and snapshots use it
		{"pickle", []string{"ckpt", "snapshot", "cli", "agent", "supervise", "probe", "store", "sampler"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			d := deps(t, tt.pkg)
			if !d[tt.pkg] {
				t.Fatalf("go list found no package %s", tt.pkg)
			}
			for _, f := range tt.forbidden {
				if d[f] {
					t.Errorf("%s imports %s (directly or not)", tt.pkg, f)
				}
			}
		})
	}
}
