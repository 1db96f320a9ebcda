// Package probetmp gives the probe benchmarks their scratch directory with
// vramguard's probe installed in it.
package probetmp

import (
	"os"

	"github.com/vramguard/vramguard/internal/probe"
)

// Install makes a temporary directory (pattern as os.MkdirTemp takes it)
// and installs the probe's Python package there. It returns the directory,
// the PYTHONPATH entry that imports the probe, and remove, which deletes
// the directory; on error nothing is left behind.
func Install(pattern string) (tmp, pythonPath string, remove func(), err error) {
	tmp, err = os.MkdirTemp("", pattern)
	if err != nil {
		return "", "", nil, err
	}
	remove = func() { os.RemoveAll(tmp) }
	pythonPath, err = probe.Install(tmp)
	if err != nil {
		remove()
		return "", "", nil, err
	}
	return tmp, pythonPath, remove, nil
}
