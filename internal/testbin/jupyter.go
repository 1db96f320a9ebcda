package testbin

import (
	"os"
	"path/filepath"
	"strings"
)

// JupyterLab is a private Jupyter installation for one test: the
// directories Jupyter and IPython read their kernelspecs, runtime files
// and settings from, and the vramguard state directory.
type JupyterLab struct {
	Data, Config, IPython, Home string
}

// Environ is this process's environment with every JUPYTER_* and
// VRAMGUARD_* variable, IPYTHONDIR and XDG_DATA_HOME replaced by the lab's
// own: Jupyter, IPython and vramguard started with it read and write only
// below the lab's directories (runtime files in Data/runtime).
func (l JupyterLab) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "JUPYTER_") || strings.HasPrefix(k, "VRAMGUARD_") || k == "IPYTHONDIR" || k == "XDG_DATA_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "JUPYTER_DATA_DIR="+l.Data, "JUPYTER_RUNTIME_DIR="+filepath.Join(l.Data, "runtime"),
		"JUPYTER_CONFIG_DIR="+l.Config, "JUPYTER_PATH="+l.Data, "IPYTHONDIR="+l.IPython,
		"VRAMGUARD_HOME="+l.Home, "JUPYTER_PLATFORM_DIRS=0")
}
