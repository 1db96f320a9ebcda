package attrib

import (
	"path/filepath"
	"strings"
)

// KernelID returns the Jupyter kernel id when argv is an IPython kernel
// started with a connection file (`-f .../kernel-<id>.json`, or `--f=...` as
// some front ends write it).
func KernelID(argv []string) (string, bool) {
	isKernel := false
	for _, a := range argv {
		if strings.Contains(a, "ipykernel") {
			isKernel = true
			break
		}
	}
	if !isKernel {
		return "", false
	}
	for i, a := range argv {
		var file string
		switch {
		case a == "-f" && i+1 < len(argv):
			file = argv[i+1]
		case strings.HasPrefix(a, "--f="), strings.HasPrefix(a, "-f="):
			file = a[strings.IndexByte(a, '=')+1:]
		default:
			continue
		}
		base := filepath.Base(file)
		if strings.HasPrefix(base, "kernel-") && strings.HasSuffix(base, ".json") {
			return strings.TrimSuffix(strings.TrimPrefix(base, "kernel-"), ".json"), true
		}
	}
	return "", false
}
