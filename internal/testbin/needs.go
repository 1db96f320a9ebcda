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
	// Modules must all be on the module path of /usr/bin/python3
	// (Python()) in isolated mode. They are found, not imported: importing
	// torch costs seconds of CPU, in every test process that checks it.
	Modules []string
}

// The dependencies of the test suite, by what needs them.
var (
	Torch         = Dep{Package: "python3-torch", Modules: []string{"torch", "torch.nn"}}
	NumPy         = Dep{Package: "python3-numpy", Modules: []string{"numpy"}}
	IPython       = Dep{Package: "python3-ipython", Modules: []string{"IPython"}}
	IPyKernel     = Dep{Package: "python3-ipykernel", Modules: []string{"ipykernel"}}
	JupyterServer = Dep{Package: "jupyter-server", Modules: []string{"jupyter_server"}}
	JupyterClient = Dep{Package: "python3-jupyter-client", Modules: []string{"jupyter_client"}}
	NBClient      = Dep{Package: "python3-nbclient", Modules: []string{"nbclient"}}
	Psutil        = Dep{Package: "python3-psutil", Modules: []string{"psutil"}}
	Tmux          = Dep{Package: "tmux", Programs: []string{"tmux"}}
	Chromium      = Dep{Package: "chromium", Programs: []string{"chromium"}}
	ChromeDriver  = Dep{Package: "chromium-driver", Programs: []string{"chromedriver"}}
	Prometheus    = Dep{Package: "prometheus", Programs: []string{"prometheus", "promtool"}}
	// Zstandard is Debian's zstd binding, what pandas reads .zst pickles with.
	Zstandard = Dep{Package: "python3-zstandard", Modules: []string{"zstandard"}}
	// Setpriv runs a process as another user (a scan as an unprivileged one).
	Setpriv = Dep{Package: "util-linux", Programs: []string{"setpriv"}}
)

// AllDeps lists every Dep above.
var AllDeps = []Dep{Torch, NumPy, IPython, IPyKernel, JupyterServer, JupyterClient, NBClient, Psutil,
	Tmux, Chromium, ChromeDriver, Prometheus, Zstandard, Setpriv, Slurm, Munge}

var depChecks sync.Map // Package -> error (nil: present)

// Missing returns the one-line reason d is not usable here, or "" when it is.
// Each Dep is checked once per test process.
func (d Dep) Missing() string {
	check(d)
	v, _ := depChecks.Load(d.Package)
	if err, _ := v.(error); err != nil {
		return fmt.Sprintf("needs Debian package %s (%v): scripts/test.sh installs what the tests need", d.Package, err)
	}
	return ""
}

// findModules is the Python that says, for each module named in argv,
// "ok" or why it cannot be imported, without importing it or its parents.
const findModules = `import sys, importlib.util
from importlib.machinery import PathFinder
for name in sys.argv[1:]:
    parts, why, path = name.split("."), "ok", None
    for i, part in enumerate(parts):
        spec = importlib.util.find_spec(part) if i == 0 else PathFinder.find_spec(part, path)
        if spec is None:
            why = "No module named '%s'" % ".".join(parts[: i + 1])
            break
        path = spec.submodule_search_locations
        if path is None and i < len(parts) - 1:
            why = "'%s' is not a package" % ".".join(parts[: i + 1])
            break
    print(name + "\t" + why)
`

// check records the state of each Dep not checked yet, with one Python
// process for all their modules.
func check(deps ...Dep) {
	var todo []Dep
	var mods []string
	for _, d := range deps {
		if _, ok := depChecks.Load(d.Package); !ok {
			todo = append(todo, d)
			mods = append(mods, d.Modules...)
		}
	}
	if len(todo) == 0 {
		return
	}
	found := map[string]string{} // module -> "ok" or why not
	var pyErr error
	if len(mods) > 0 {
		// -I: a PYTHONPATH that shadows torch (the tests' own fakes) must
		// not hide that the real one is missing.
		out, err := exec.Command(Python(), append([]string{"-I", "-c", findModules}, mods...)...).CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			pyErr = fmt.Errorf("%s: %v: %s", Python(), err, lines[len(lines)-1])
		}
		for _, line := range strings.Split(string(out), "\n") {
			if name, why, ok := strings.Cut(line, "\t"); ok {
				found[name] = why
			}
		}
	}
	for _, d := range todo {
		depChecks.LoadOrStore(d.Package, d.state(found, pyErr))
	}
}

// state is d's error, nil when it is there, from its programs and the
// modules found.
func (d Dep) state(found map[string]string, pyErr error) error {
	for _, p := range d.Programs {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%s is not on PATH", p)
		}
	}
	for _, m := range d.Modules {
		switch why := found[m]; {
		case pyErr != nil:
			return pyErr
		case why != "ok":
			return fmt.Errorf("%s cannot import %s: %s", Python(), m, why)
		}
	}
	return nil
}

// Need fails t at once, in one line per missing Dep, unless every dep is
// there.
func Need(t testing.TB, deps ...Dep) {
	t.Helper()
	check(deps...)
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
	check(deps...)
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

// NeedRoot fails t at once (never skips: CI runs the suite as root) unless
// this process is root; why says what the test does that needs it.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("%s: run it as root (CI does)", why)
	}
}
