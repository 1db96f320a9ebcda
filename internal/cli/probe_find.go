package cli

import (
	"os"
	"path/filepath"

	"github.com/vramguard/vramguard/internal/probe"
)

// findProbe returns the probe directory for jobs and notebooks: the one in
// the vramguard Python package this binary was installed with (pip install
// vramguard), else the embedded probe written under the state directory
// (docs/PROBE.md, "How it gets into a job").
func findProbe(f *Factory) (string, probe.Source, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	}
	return probe.Find(exe, filepath.Join(f.Home(), "probe"))
}
