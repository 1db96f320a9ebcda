package attrib

import (
	"path/filepath"
	"strings"
)

// ConnectionFile returns the connection-file argument of a command line
// (`-f FILE`, `--f=FILE`, `-f=FILE`, `--connection-file FILE`), whatever
// the kernel's language and whatever the file is called.
func ConnectionFile(argv []string) (string, bool) {
	for i, a := range argv {
		var file string
		switch {
		case (a == "-f" || a == "--f" || a == "--connection-file") && i+1 < len(argv):
			file = argv[i+1]
		case strings.HasPrefix(a, "--f="), strings.HasPrefix(a, "-f="), strings.HasPrefix(a, "--connection-file="):
			file = a[strings.IndexByte(a, '=')+1:]
		default:
			continue
		}
		if file != "" {
			return file, true
		}
	}
	return "", false
}

// ServerKernelID is the kernel id a Jupyter server names its connection
// files by (`kernel-<id>.json`, the id its REST API lists); ok is false for
// any other name (a client's temporary file, an editor's own).
func ServerKernelID(file string) (string, bool) {
	base := filepath.Base(file)
	if !strings.HasPrefix(base, "kernel-") || !strings.HasSuffix(base, ".json") {
		return "", false
	}
	id := strings.TrimSuffix(strings.TrimPrefix(base, "kernel-"), ".json")
	return id, id != ""
}

// KernelID tells whether argv is an IPython kernel (ipykernel) started on
// a connection file, of a server's naming (`kernel-<id>.json`) or any other
// (`/tmp/tmpa1b2c3d4.json`, as nbclient and a bare KernelManager name theirs,
// or an editor's). id is the server's kernel id; it is "" for a file of
// another name, whose kernel only its contents identify (KernelHints).
func KernelID(argv []string) (id, file string, ok bool) {
	isKernel := false
	for _, a := range argv {
		if strings.Contains(a, "ipykernel") {
			isKernel = true
			break
		}
	}
	if !isKernel {
		return "", "", false
	}
	file, ok = ConnectionFile(argv)
	if !ok || !strings.HasSuffix(file, ".json") {
		return "", "", false
	}
	id, _ = ServerKernelID(file)
	return id, file, true
}

// kernel is the kernel the job rooted at pid runs, if it is one: the
// server's id from the file's name, else the id the hints give for the
// file ("" without one).
func (ps *pass) kernel(pid int) (string, bool) {
	id, file, ok := KernelID(ps.cmdline(pid))
	if !ok || id != "" {
		return id, ok
	}
	if kh, hok := ps.a.Hints.(KernelHints); hok {
		if k, kok := kh.KernelForConnection(pid, file); kok {
			return k, true
		}
	}
	return "", true
}
