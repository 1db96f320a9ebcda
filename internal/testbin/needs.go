package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Dep is something outside Go the tests need: a Debian package, and how to
// tell that it is there (a program on PATH, a module Python can import).
// scripts/test.sh installs every package a Dep names (TestDepsAreInstalled
// keeps the two lists one).
type Dep struct {
	// Package is the Debian package that provides it.
	Package string
	// Programs must all be on PATH.
	Programs []string
	// Import is a Python statement /usr/bin/python3 (Python()) must run.
	Import string
}

// The dependencies of the test suite, by what needs them.
var (
	Torch         = Dep{Package: "python3-torch", Import: "import torch, torch.nn"}
	NumPy         = Dep{Package: "python3-numpy", Import: "import numpy"}
	IPython       = Dep{Package: "python3-ipython", Import: "import IPython"}
	IPyKernel     = Dep{Package: "python3-ipykernel", Import: "import ipykernel"}
	JupyterServer = Dep{Package: "jupyter-server", Import: "import jupyter_server"}
	JupyterClient = Dep{Package: "python3-jupyter-client", Import: "import jupyter_client"}
	NBClient      = Dep{Package: "python3-nbclient", Import: "import nbclient"}
	Psutil        = Dep{Package: "python3-psutil", Import: "import psutil"}
	Tmux          = Dep{Package: "tmux", Programs: []string{"tmux"}}
	Chromium      = Dep{Package: "chromium", Programs: []string{"chromium"}}
	ChromeDriver  = Dep{Package: "chromium-driver", Programs: []string{"chromedriver"}}
	Prometheus    = Dep{Package: "prometheus", Programs: []string{"prometheus", "promtool"}}
	// Zstandard is Debian's zstd binding, what pandas reads .zst pickles with.
	Zstandard = Dep{Package: "python3-zstandard", Import: "import zstandard"}
	// Setpriv runs a process as another user (a scan as an unprivileged one).
	Setpriv = Dep{Package: "util-linux", Programs: []string{"setpriv"}}
)

// AllDeps lists every Dep above.
var AllDeps = []Dep{Torch, NumPy, IPython, IPyKernel, JupyterServer, JupyterClient, NBClient, Psutil,
	Tmux, Chromium, ChromeDriver, Prometheus, Zstandard, Setpriv}

var depChecks sync.Map // Package -> error (nil: present)

// Missing returns the one-line reason d is not usable here, or "" when it is.
// Each Dep is checked once per test process.
func (d Dep) Missing() string {
	v, ok := depChecks.Load(d.Package)
	if !ok {
		v, _ = depChecks.LoadOrStore(d.Package, d.check())
	}
	if err, _ := v.(error); err != nil {
		return fmt.Sprintf("needs Debian package %s (%v): scripts/test.sh installs what the tests need", d.Package, err)
	}
	return ""
}

func (d Dep) check() error {
	for _, p := range d.Programs {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%s is not on PATH", p)
		}
	}
	if d.Import != "" {
		// A clean environment: a PYTHONPATH that shadows torch (the tests'
		// own fakes) must not hide that the real one is missing.
		cmd := exec.Command(Python(), "-I", "-c", d.Import)
		if out, err := cmd.CombinedOutput(); err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			return fmt.Errorf("%s: %q failed: %s", Python(), d.Import, lines[len(lines)-1])
		}
	}
	return nil
}

// Need fails t at once, in one line per missing Dep, unless every dep is
// there.
func Need(t testing.TB, deps ...Dep) {
	t.Helper()
	var miss []string
	for _, d := range deps {
		if m := d.Missing(); m != "" {
			miss = append(miss, m)
		}
	}
	if len(miss) > 0 {
		t.Fatal(strings.Join(miss, "\n"))
	}
}

// Require is for TestMain, before m.Run, in a package whose tests all need
// deps: when one is missing it prints one line for each and exits 1 before
// any test runs, so the cause is not buried in every test's output.
func Require(deps ...Dep) {
	missing := false
	for _, d := range deps {
		if msg := d.Missing(); msg != "" {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			missing = true
		}
	}
	if missing {
		os.Exit(1)
	}
}
