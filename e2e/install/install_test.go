// Package install checks vramguard the way its users install it: the
// release script (scripts/dist.sh) builds every artifact from this
// checkout, then the wheel goes into a fresh virtual environment, dpkg
// installs the .deb into a private install root, and the Dockerfile's
// image is rehearsed. It needs what .ci/run installs (Debian's
// python3-venv, python3-wheel, python3-ipython, python3-torch, systemd,
// man-db, bash-completion, and gcc-aarch64-linux-gnu for the arm64 build)
// and root for dpkg -i.
package install

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
	"github.com/vramguard/vramguard/internal/testbin"
)

// dist is what TestMain's run of scripts/dist.sh made.
var dist struct {
	dir      string
	log      string // what dist.sh printed
	arches   []string
	vars     map[string]string // dist/versions.env
	err      error
	repoRoot string
	head     string // the commit dist.sh built (versions.env's REVISION)
}

func TestMain(m *testing.M) {
	code := func() int {
		tmp, err := os.MkdirTemp("", "vramguard-dist-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(tmp)
		buildDist(tmp)
		return m.Run()
	}()
	os.Exit(code)
}

// buildDist runs the release script once for every test of the package.
func buildDist(tmp string) {
	root, err := filepath.Abs("../..")
	if err != nil {
		dist.err = err
		return
	}
	dist.repoRoot = root
	dist.dir = filepath.Join(tmp, "dist")
	dist.arches = []string{"amd64"}
	if _, err := exec.LookPath("aarch64-linux-gnu-gcc"); err == nil {
		dist.arches = append(dist.arches, "arm64")
	}
	env := withEnv(os.Environ(), "DIST_DIR="+dist.dir, "DIST_ARCHES="+strings.Join(dist.arches, " "))
	if os.Geteuid() != 0 {
		// Starting the image needs root; TestImageRehearsal says so.
		env = append(env, "DIST_IMAGE_RUN=0")
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "dist.sh"))
	cmd.Dir, cmd.Env = root, env
	out, err := cmd.CombinedOutput()
	dist.log = string(out)
	if err != nil {
		dist.err = fmt.Errorf("scripts/dist.sh: %v\n%s", err, out)
		return
	}
	dist.vars = map[string]string{}
	b, err := os.ReadFile(filepath.Join(dist.dir, "versions.env"))
	if err != nil {
		dist.err = err
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		dist.vars[k] = v
	}
	// dist.sh checked that its binary is stamped with the commit it read;
	// that commit must be this checkout's (HEAD, or an ancestor when
	// someone committed while it ran).
	dist.head = dist.vars["REVISION"]
	if err := exec.Command("git", "-C", root, "merge-base", "--is-ancestor", dist.head, "HEAD").Run(); dist.head == "" || err != nil {
		dist.err = fmt.Errorf("versions.env names revision %q, which is not this checkout's HEAD or before it (%v)", dist.head, err)
	}
}

func needDist(t *testing.T) {
	t.Helper()
	if dist.err != nil {
		t.Fatal(dist.err)
	}
}

// only returns the one file of dist matching pattern.
func only(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dist.dir, pattern))
	if len(m) != 1 {
		t.Fatalf("dist has %d files matching %s, want 1: %v\ndist.sh said:\n%s", len(m), pattern, m, dist.log)
	}
	return m[0]
}

func run(t *testing.T, env []string, name string, args ...string) testbin.Result {
	t.Helper()
	cmd := testbin.Command(t, env, name, args...)
	return testbin.Run(t, cmd)
}

func must(t *testing.T, r testbin.Result) testbin.Result {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// gitHead is the commit the release was built from.
func gitHead(*testing.T) string { return dist.head }

// checkVersion runs `BIN version --json` and checks the stamped version
// and the commit.
func checkVersion(t *testing.T, env []string, bin string, args ...string) {
	t.Helper()
	var v struct {
		Version, Revision string
	}
	must(t, run(t, env, bin, append(args, "version", "--json")...)).JSON(t, &v)
	if v.Version != dist.vars["VERSION"] || v.Revision != gitHead(t) {
		t.Errorf("%s version: %q at %q, want %q at %q", bin, v.Version, v.Revision, dist.vars["VERSION"], gitHead(t))
	}
}

func TestReleaseArtifacts(t *testing.T) {
	needDist(t)
	version := dist.vars["VERSION"]
	if version == "" || dist.vars["DEB_VERSION"] == "" || dist.vars["IMAGE_TAG"] == "" {
		t.Fatalf("versions.env: %v", dist.vars)
	}
	t.Logf("dist.sh built %s for %v", version, dist.arches)
	if len(dist.arches) == 1 {
		t.Logf("arm64 was not built: aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu; .ci/run does)")
	}
	// Every artifact is in SHA256SUMS, and the sums hold.
	sums, err := os.ReadFile(filepath.Join(dist.dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	check.Dir = dist.dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum --check: %v\n%s", err, out)
	}
	fileArch := map[string]string{"amd64": "x86-64", "arm64": "ARM aarch64"}
	wheelArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}
	for _, arch := range dist.arches {
		bin := filepath.Join(dist.dir, "linux-"+arch, "vramguard")
		out, err := exec.Command("file", "-b", bin).Output()
		if err != nil || !strings.HasPrefix(string(out), "ELF 64-bit LSB ") || !strings.Contains(string(out), ", "+fileArch[arch]+",") ||
			!strings.Contains(string(out), "dynamically linked") {
			t.Errorf("%s: file says %q (%v), want a dynamically linked (cgo) %s ELF", bin, out, err, fileArch[arch])
		}
		whl := only(t, fmt.Sprintf("vramguard-%s-py3-none-manylinux_*_%s.whl", version, wheelArch[arch]))
		deb := only(t, fmt.Sprintf("vramguard_%s_%s.deb", dist.vars["DEB_VERSION"], arch))
		for _, p := range []string{"linux-" + arch + "/vramguard", filepath.Base(whl), filepath.Base(deb)} {
			if !regexp.MustCompile(`(?m)^[0-9a-f]{64}  ` + regexp.QuoteMeta(p) + `$`).Match(sums) {
				t.Errorf("SHA256SUMS lacks %s:\n%s", p, sums)
			}
		}
		// The manylinux tag is the glibc the binary asks for.
		deps := must(t, run(t, nil, "dpkg-deb", "-f", deb, "Depends")).Stdout
		glibc := regexp.MustCompile(`libc6 \(>= (\d+)\.(\d+)\)`).FindStringSubmatch(deps)
		if glibc == nil || !strings.Contains(whl, fmt.Sprintf("manylinux_%s_%s_", glibc[1], glibc[2])) {
			t.Errorf("%s: tag and the .deb's Depends %q disagree", filepath.Base(whl), deps)
		}
	}
	checkVersion(t, nil, filepath.Join(dist.dir, "linux-amd64", "vramguard"))
}

// venvFiles lists every path under dir, for a before/after comparison.
func venvFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const trainPy = `import os, sys, torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.save(model.state_dict(), sys.argv[1])
import vramguard
print("probe from", os.path.dirname(vramguard.__file__))
`

// The amd64 wheel in a fresh virtual environment of Debian's Python. It
// has --system-site-packages for IPython and torch, which the wheel does
// not depend on; the wheel's own files come first on sys.path.
func TestWheelInVirtualEnvironment(t *testing.T) {
	needDist(t)
	t.Parallel()
	whl := only(t, "vramguard-*-manylinux_*_x86_64.whl")
	python := testbin.Python()
	tmp := t.TempDir()

	// Debian's python3-wheel unpacks it, checking every file against RECORD.
	must(t, run(t, nil, python, "-m", "wheel", "unpack", "--dest", filepath.Join(tmp, "unpacked"), whl))

	venv := filepath.Join(tmp, "venv")
	must(t, run(t, nil, python, "-m", "venv", "--system-site-packages", venv))
	before := venvFiles(t, venv)
	vpy := filepath.Join(venv, "bin", "python")
	must(t, run(t, nil, vpy, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check", "-q", whl))

	home := filepath.Join(tmp, "state")
	env := withEnv(os.Environ(), "PATH="+filepath.Join(venv, "bin")+":"+os.Getenv("PATH"), "VRAMGUARD_HOME="+home,
		"IPYTHONDIR="+filepath.Join(tmp, "ipython"))
	site := filepath.Join(venv, "lib", fmt.Sprintf("python3.%s", pyMinor(t, vpy)), "site-packages")

	// The binary is on PATH as vramguard; python -m vramguard runs it.
	vg := filepath.Join(venv, "bin", "vramguard")
	if p, err := lookPath("vramguard", env); err != nil || p != vg {
		t.Fatalf("vramguard on PATH: %q %v, want the venv's %s", p, err, vg)
	}
	checkVersion(t, env, vg)
	checkVersion(t, env, vpy, "-m", "vramguard")
	r := must(t, run(t, env, vpy, "-c", "import vramguard; print(vramguard.__file__)"))
	if got := strings.TrimSpace(r.Stdout); got != filepath.Join(site, "vramguard", "__init__.py") {
		t.Errorf("import vramguard: %s, want the wheel's package in %s", got, site)
	}
	var pp struct{ Path, Source string }
	must(t, run(t, env, vg, "python-path", "--json")).JSON(t, &pp)
	if pp.Source != "package" || pp.Path != filepath.Join(site, probe.PackagedDir) {
		t.Errorf("python-path: %+v, want the wheel's %s", pp, filepath.Join(site, probe.PackagedDir))
	}

	// A supervised job of this environment's Python gets the probe from
	// the wheel's own files: nothing is written under the state directory.
	script := filepath.Join(tmp, "train.py")
	if err := os.WriteFile(script, []byte(trainPy), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(tmp, "model.pt")
	r = must(t, run(t, env, vg, "run", "--name", "wheel-train", "--", "python", script, ckpt))
	if !strings.Contains(r.Stdout, "probe from "+filepath.Join(site, probe.PackagedDir, "vramguard")) {
		t.Errorf("the job's vramguard module is not the wheel's probe:\n%s", r.Stdout)
	}
	var ex struct {
		Probe struct {
			Samples        int
			OptimizerSteps int `json:"optimizer_steps"`
			Checkpoints    []struct{ Path string }
		}
	}
	must(t, run(t, env, vg, "explain", "wheel-train", "--json")).JSON(t, &ex)
	if ex.Probe.Samples < 1 || ex.Probe.OptimizerSteps != 3 || len(ex.Probe.Checkpoints) != 1 || ex.Probe.Checkpoints[0].Path != ckpt {
		t.Errorf("explain's probe: %+v, want samples, 3 optimizer steps and the checkpoint %s", ex.Probe, ckpt)
	}
	if _, err := os.Stat(filepath.Join(home, "probe")); !os.IsNotExist(err) {
		t.Errorf("the probe was copied under the state directory (%v)", err)
	}

	// %load_ext vramguard in this environment's IPython reports to the
	// agent's socket under the state directory.
	l, err := probe.Listen(probe.DefaultSocket(home))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cell := strings.Join([]string{
		"%load_ext vramguard",
		"import os, vramguard",
		"for _ in range(3): vramguard.step()",
		"print('pid', os.getpid(), vramguard.__file__)",
		"%unload_ext vramguard",
	}, "\n")
	r = must(t, run(t, env, vpy, "-m", "IPython", "--quick", "--no-banner", "--colors=NoColor",
		"--HistoryManager.enabled=False", "--TerminalInteractiveShell.term_title=False", "-c", cell))
	m := regexp.MustCompile(`pid (\d+) (\S+)`).FindStringSubmatch(r.Stdout)
	if m == nil || m[2] != filepath.Join(site, "vramguard", "__init__.py") {
		t.Fatalf("IPython: %q, want the wheel's vramguard", r.Stdout)
	}
	pid, _ := strconv.Atoi(m[1])
	var s probe.Summary
	deadline := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case msg := <-l.Messages():
			if msg.PID == pid {
				s.Add(msg)
				done = msg.Type == probe.TypeDisconnect
			}
		case <-deadline:
			t.Fatalf("the IPython kernel's probe did not report and disconnect in 20 s (%+v)", s.Probe)
		}
	}
	if s.UserSteps != 3 {
		t.Errorf("IPython's probe counted %d steps, want 3", s.UserSteps)
	}

	// Uninstalling leaves the environment as it was before the install.
	must(t, run(t, env, vpy, "-m", "pip", "uninstall", "-y", "-q", "vramguard"))
	after := venvFiles(t, venv)
	var extra []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			extra = append(extra, p)
		}
	}
	if len(extra) > 0 {
		t.Errorf("pip uninstall left %d paths behind: %v", len(extra), extra)
	}
}

// withEnv returns base with each KEY=VALUE of kv set, replacing any value
// base had.
func withEnv(base []string, kv ...string) []string {
	out := make([]string, 0, len(base)+len(kv))
	for _, e := range base {
		k, _, _ := strings.Cut(e, "=")
		if !slices.ContainsFunc(kv, func(s string) bool { return strings.HasPrefix(s, k+"=") }) {
			out = append(out, e)
		}
	}
	return append(out, kv...)
}

func pyMinor(t *testing.T, py string) string {
	t.Helper()
	r := must(t, run(t, nil, py, "-c", "import sys; print(sys.version_info[1])"))
	return strings.TrimSpace(r.Stdout)
}

func lookPath(name string, env []string) (string, error) {
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(p) {
				f := filepath.Join(d, name)
				if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
					return f, nil
				}
			}
		}
	}
	return "", exec.ErrNotFound
}

// The .deb, installed by dpkg as on a user's machine: dpkg -i, the
// installed command, unit, man page and completion, then dpkg -r and
// --purge. dpkg works on a private install root (debRoot), not on this
// machine's: its database and lock are the test's own, so two runs of the
// suite at once (or a vramguard package installed here) do not meet.
func TestDebianPackage(t *testing.T) {
	needDist(t)
	if os.Geteuid() != 0 {
		t.Fatal("installing the .deb needs root (dpkg -i); run the tests as root, as CI does (.ci/run)")
	}
	t.Parallel()
	deb := only(t, fmt.Sprintf("vramguard_%s_amd64.deb", dist.vars["DEB_VERSION"]))
	root := debRoot(t)
	admin := filepath.Join(root, "var", "lib", "dpkg")
	dpkg := func(args ...string) testbin.Result {
		return run(t, nil, "dpkg", append([]string{"--root=" + root}, args...)...)
	}
	status := func() string {
		st, _ := exec.Command("dpkg-query", "--admindir="+admin, "-W", "-f=${Status}", "vramguard").Output()
		return string(st)
	}
	// A slimmed Debian image excludes /usr/share/man from every package
	// (path-exclude in /etc/dpkg/dpkg.cfg.d); the man pages are part of
	// what is tested here, so they are put back for this package.
	must(t, dpkg("--path-include=/usr/share/man/man1/vramguard*", "-i", deb))
	if st := status(); st != "install ok installed" {
		t.Fatalf("after dpkg -i the package is %q", st)
	}
	files := strings.Fields(must(t, run(t, nil, "dpkg-query", "--admindir="+admin, "-L", "vramguard")).Stdout)
	in := func(p string) string { return filepath.Join(root, p) }
	for _, want := range []string{"/usr/bin/vramguard", "/lib/systemd/system/vramguard.service", "/usr/share/man/man1/vramguard-run.1.gz",
		"/usr/share/bash-completion/completions/vramguard", "/usr/share/doc/vramguard/README.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("dpkg -L vramguard lacks %s", want)
		}
		if fi, err := os.Stat(in(want)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s is not installed: %v", want, err)
		}
	}

	bin := in("/usr/bin/vramguard")
	checkVersion(t, nil, bin)
	home := t.TempDir()
	env := withEnv(os.Environ(), "VRAMGUARD_HOME="+home)
	r := run(t, env, bin, "doctor", "--json", "--python", testbin.Python())
	var rep struct {
		Checks []struct{ ID, Status string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || (r.Code != 0 && r.Code != 1) || len(rep.Checks) < 10 {
		t.Errorf("vramguard doctor: exit %d, %d checks (%v)\n%s%s", r.Code, len(rep.Checks), err, r.Stdout, r.Stderr)
	}

	// systemd reads the unit under the install root, its ExecStart
	// binary too
	unit := "/lib/systemd/system/vramguard.service"
	r = run(t, nil, "systemd-analyze", "verify", "--root="+root, unit)
	if r.Code != 0 || strings.Contains(r.Stderr, "vramguard") {
		t.Errorf("systemd-analyze verify --root=%s %s: exit %d\n%s%s", root, unit, r.Code, r.Stdout, r.Stderr)
	}
	if b, _ := os.ReadFile(in(unit)); !bytes.Contains(b, []byte("\nExecStart=/usr/bin/vramguard serve ")) {
		t.Errorf("%s does not start the packaged binary:\n%s", unit, b)
	}

	man := run(t, withEnv(os.Environ(), "MANPAGER=cat", "MANWIDTH=100"), "man", "-M", in("/usr/share/man"), "vramguard-run")
	if man.Code != 0 || !strings.Contains(man.Stdout, "vramguard run [flags] -- COMMAND") || !strings.Contains(man.Stdout, "--restart") {
		t.Errorf("man vramguard-run: exit %d\n%s%s", man.Code, man.Stdout, man.Stderr)
	}

	// bash-completion loads the script by the command's name from the
	// root's share directory, as an interactive shell does on the first
	// TAB; completing "vramguard ru" then asks the installed binary.
	comp := run(t, withEnv(os.Environ(), "XDG_DATA_DIRS="+in("/usr/share"), "PATH="+in("/usr/bin")+":"+os.Getenv("PATH")), "bash", "-c", `source /usr/share/bash-completion/bash_completion
_completion_loader vramguard
complete -p vramguard || exit 1
COMP_WORDS=(vramguard ru); COMP_CWORD=1; COMP_LINE="vramguard ru"; COMP_POINT=${#COMP_LINE}
__start_vramguard vramguard ru vramguard 2>/dev/null
printf 'candidate %s\n' "${COMPREPLY[@]}"`)
	if comp.Code != 0 || !strings.Contains(comp.Stdout, "-F __start_vramguard vramguard") ||
		!strings.Contains(comp.Stdout, "candidate run\n") || !strings.Contains(comp.Stdout, "candidate runs\n") {
		t.Errorf("bash completion: exit %d\n%s%s", comp.Code, comp.Stdout, comp.Stderr)
	}

	// the agent's state (StateDirectory=vramguard) stays on remove and
	// goes on purge, by the package's postrm run in the root
	state := in("/var/lib/vramguard/state.db")
	if err := os.MkdirAll(filepath.Dir(state), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, dpkg("-r", "vramguard"))
	var left []string
	for _, f := range files {
		// Directories the package shares with others (/usr/bin, /lib,
		// a symlink on a merged-/usr system) stay; its own go.
		fi, err := os.Stat(in(f))
		if err == nil && (!fi.IsDir() || strings.Contains(f, "vramguard")) {
			left = append(left, f)
		}
	}
	if len(left) > 0 {
		t.Errorf("dpkg -r left %v", left)
	}
	if st := status(); st != "deinstall ok config-files" {
		t.Errorf("after dpkg -r the package is %q, want its configuration kept", st)
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("dpkg -r removed the agent's state: %v", err)
	}
	must(t, dpkg("--purge", "vramguard"))
	if st := status(); len(st) > 0 && !strings.Contains(st, "not-installed") {
		t.Errorf("after dpkg --purge the package is %q", st)
	}
	if _, err := os.Stat(filepath.Dir(state)); !os.IsNotExist(err) {
		t.Errorf("dpkg --purge left the agent's state %s (%v)", filepath.Dir(state), err)
	}
}

// debRoot makes a private install root for dpkg --root: a database of
// this machine's installed packages and their files (less any vramguard),
// so that the .deb's Depends are checked against what is really here; the
// shell and rm (with the libraries they load) that its maintainer scripts
// use, since dpkg runs them chrooted into the root; and systemd's units.
func debRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	admin := filepath.Join(root, "var", "lib", "dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, st := range strings.Split(string(b), "\n\n") {
		f := stanza(st)
		if f["Package"] == "" || f["Package"] == "vramguard" {
			continue
		}
		keep = append(keep, st)
		// each package's list of files, as here: dpkg then knows the
		// directories the package shares with others (and keeps them on
		// remove) as it does on this machine
		list := f["Package"]
		if f["Multi-Arch"] == "same" {
			list += ":" + f["Architecture"]
		}
		b, err := os.ReadFile(filepath.Join("/var/lib/dpkg/info", list+".list"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(admin, "info", list+".list"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(admin, "status"), []byte(strings.Join(keep, "\n\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rm, err := exec.LookPath("rm")
	if err != nil {
		t.Fatal(err)
	}
	// the scripts' interpreter, by the path they name; the commands they
	// run, as PATH finds them
	for _, p := range []string{"/bin/sh", rm} {
		paths := []string{p}
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", p, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if filepath.IsAbs(f) {
				paths = append(paths, f)
			}
		}
		for _, p := range paths {
			if err := mirror(root, p); err != nil {
				t.Fatalf("copying %s into the install root: %v", p, err)
			}
		}
	}
	// systemd's own units, which the package's unit depends on
	// (sysinit.target), for systemd-analyze verify --root
	units, err := filepath.EvalSymlinks("/lib/systemd/system")
	if err != nil {
		t.Fatal(err)
	}
	if err := mirror(root, "/lib/systemd/system"); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(units, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == units {
			return err
		}
		dst := filepath.Join(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case d.IsDir():
			return os.Mkdir(dst, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		}
	})
	if err != nil {
		t.Fatalf("copying systemd's units into the install root: %v", err)
	}
	return root
}

// stanza is the single-line fields of one stanza of dpkg's status file.
func stanza(s string) map[string]string {
	f := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && !strings.HasPrefix(l, " ") {
			f[k] = v
		}
	}
	return f
}

// mirror copies the file at path p of this machine to the same path under
// root, with every symbolic link on the way (a merged /usr's /bin, /lib64)
// made there as it is here and followed.
func mirror(root, p string) error {
	dir := "/"
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	for i, part := range parts {
		cur := filepath.Join(dir, part)
		dst := filepath.Join(root, cur)
		fi, err := os.Lstat(cur)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(cur)
			if err != nil {
				return err
			}
			if _, err := os.Lstat(dst); os.IsNotExist(err) {
				if err := os.Symlink(target, dst); err != nil {
					return err
				}
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(dir, target)
			}
			return mirror(root, filepath.Join(append([]string{target}, parts[i+1:]...)...))
		case fi.IsDir():
			if err := os.MkdirAll(dst, fi.Mode().Perm()); err != nil {
				return err
			}
		case i == len(parts)-1 && fi.Mode().IsRegular():
			b, err := os.ReadFile(cur)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, fi.Mode().Perm())
		default:
			return fmt.Errorf("%s is neither a directory, a link nor a file", cur)
		}
		dir = cur
	}
	return nil
}

// The Dockerfile's image, rehearsed by dist.sh (no container engine runs
// here): its binary is the one dist.sh built and tried, it starts on the
// base's glibc, and its command ran as the unprivileged user.
func TestImageRehearsal(t *testing.T) {
	needDist(t)
	if os.Geteuid() != 0 {
		t.Fatal("dist.sh starts the image's command only as root (chroot, namespaces, user switch); run the tests as root, as CI does (.ci/run)")
	}
	want := []string{
		"image amd64: COPY dist/linux-amd64/vramguard /usr/bin/vramguard: starts on the base",
		"image amd64: deploy/kubernetes/vramguard.yaml runs it with the same arguments and user",
		"ran as uid 65532 on a read-only glibc-only root, answered /healthz, reported version " + dist.vars["VERSION"] + ", stopped on SIGTERM",
	}
	if slices.Contains(dist.arches, "arm64") {
		want = append(want, "image arm64: COPY dist/linux-arm64/vramguard /usr/bin/vramguard: starts on the base")
	}
	for _, w := range want {
		if !strings.Contains(dist.log, w) {
			t.Errorf("dist.sh did not say %q:\n%s", w, dist.log)
		}
	}
	// The manifest names a release, never latest.
	b, err := os.ReadFile(filepath.Join(dist.repoRoot, "deploy", "kubernetes", "vramguard.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	release, err := os.ReadFile(filepath.Join(dist.repoRoot, "packaging", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if img, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "image: "); ok {
			images = append(images, img)
		}
	}
	if want := "ghcr.io/vramguard/vramguard:" + strings.TrimSpace(string(release)); len(images) != 1 || images[0] != want {
		t.Errorf("deploy/kubernetes/vramguard.yaml names %v, want %s", images, want)
	}
}
