package probe

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The probe leaves a job's stdout, stderr and exit status exactly as they
// are without it: with no socket, with a refused one, and with a listening
// one. The job prints on both streams, trains, saves and dies of an
// uncaught exception from its own code.
func TestOutputUnchanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	script := testdata(t, "scripts/outputs.py")
	base := runPython(t, baseEnv(), nil, script, out)
	if base.code != 1 || !bytes.Contains(base.stderr, []byte("ValueError: validation failed at 42")) {
		t.Fatalf("baseline run: exit %d\nstderr:\n%s", base.code, base.stderr)
	}

	refused := filepath.Join(dir, "refused.sock")
	ln, err := net.Listen("unix", refused)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody listens: ECONNREFUSED

	cases := []struct {
		name   string
		socket func(t *testing.T) (string, *Listener)
	}{
		{"refused", func(t *testing.T) (string, *Listener) { return refused, nil }},
		{"listening", func(t *testing.T) (string, *Listener) { l := listen(t); return l.Path(), l }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sock, l := tc.socket(t)
			env := Env(baseEnv(), probeDir(t), Options{Socket: sock, RunDir: t.TempDir()})
			r := runPython(t, env, nil, script, out)
			if r.code != base.code {
				t.Errorf("exit %d, without the probe %d", r.code, base.code)
			}
			if !bytes.Equal(r.stdout, base.stdout) {
				t.Errorf("stdout differs:\n--- with probe\n%s--- without\n%s", r.stdout, base.stdout)
			}
			if !bytes.Equal(r.stderr, base.stderr) {
				t.Errorf("stderr differs:\n--- with probe\n%s--- without\n%s", r.stderr, base.stderr)
			}
			if l != nil {
				msgs := collect(t, l, r.pid)
				if len(byType(msgs, r.pid, TypeCkpt)) != 1 || len(byType(msgs, r.pid, TypeHello)) != 1 {
					dumpMessages(t, msgs)
					t.Errorf("listening probe did not report the run")
				}
			}
		})
	}
}

// No socket file at all: a job that never imports torch behaves the same.
func TestOutputUnchangedMissingSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code := "import sys, os\nprint('out', sys.argv[1:])\nprint('err', file=sys.stderr)\nos.fork() or sys.exit(0)\nos.wait()\nsys.exit(3)\n"
	script := filepath.Join(dir, "job.py")
	if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	base := runPython(t, baseEnv(), nil, script, "a", "b")
	env := Env(baseEnv(), probeDir(t), Options{Socket: filepath.Join(dir, "nope.sock"), RunDir: dir})
	r := runPython(t, env, nil, script, "a", "b")
	if base.code != 3 || r.code != base.code || !bytes.Equal(r.stdout, base.stdout) || !bytes.Equal(r.stderr, base.stderr) {
		t.Errorf("with probe: exit %d stdout %q stderr %q\nwithout:    exit %d stdout %q stderr %q",
			r.code, r.stdout, r.stderr, base.code, base.stdout, base.stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "stacks-*")); len(m) > 1 {
		t.Errorf("stack files left behind: %v", m) // the forked child exits through sys.exit, the parent too
	}
}

// A torch whose import fails: the ImportError's traceback is the one Python
// prints without the probe (nothing of the probe is on the stack while torch
// executes).
func TestTorchImportErrorUnchanged(t *testing.T) {
	t.Parallel()
	script := testdata(t, "scripts/import_broken_torch.py")
	pp := "PYTHONPATH=" + testdata(t, "brokentorch")
	base := runPython(t, baseEnv(pp), nil, script)
	if base.code != 1 || !bytes.Contains(base.stderr, []byte("libcudart.so.12")) {
		t.Fatalf("baseline: exit %d\n%s", base.code, base.stderr)
	}
	l := listen(t)
	env := Env(baseEnv(pp), probeDir(t), Options{Socket: l.Path()})
	r := runPython(t, env, nil, script)
	if r.code != base.code || !bytes.Equal(r.stdout, base.stdout) || !bytes.Equal(r.stderr, base.stderr) {
		t.Errorf("exit %d (want %d)\nstdout %q (want %q)\n--- stderr with probe\n%s--- without\n%s", r.code, base.code, r.stdout, base.stdout, r.stderr, base.stderr)
	}
	msgs := collect(t, l, r.pid)
	if len(byType(msgs, r.pid, TypeHello)) != 1 || len(byType(msgs, r.pid, TypeTorch)) != 0 || len(byType(msgs, 0, TypeError)) != 0 {
		dumpMessages(t, msgs)
		t.Errorf("messages after a failed torch import")
	}
}

// The sitecustomize the probe shadows still runs, first, and is what
// `import sitecustomize` returns; one that raises is reported by site.py
// exactly as without the probe, and the probe still starts.
func TestSitecustomizeChain(t *testing.T) {
	t.Parallel()
	user := t.TempDir()
	raising := t.TempDir()
	write := func(dir, body string) {
		if err := os.WriteFile(filepath.Join(dir, "sitecustomize.py"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(user, "import sys\nprint('user sitecustomize ran', 'vramguard' in sys.modules)\nMARK = 'user'\n")
	write(raising, "raise ValueError('broken sitecustomize')\n")
	show := "import sitecustomize, sys; print(getattr(sitecustomize, 'MARK', None), sitecustomize.__file__); print(sys.path, file=sys.stderr)"
	cases := []struct {
		name, pythonPath, want string
	}{
		// vramguard not yet imported when it runs: it runs first.
		{"user", user, "user sitecustomize ran False\nuser " + filepath.Join(user, "sitecustomize.py") + "\n"},
		// Debian's own sitecustomize (the apport hook) is on the default path.
		{"system", "", "None /usr/lib/python3.11/sitecustomize.py\n"},
		{"raising", raising, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var extra []string
			if tc.pythonPath != "" {
				extra = append(extra, "PYTHONPATH="+tc.pythonPath)
			}
			base := runPython(t, baseEnv(extra...), nil, "-c", show)
			l := listen(t)
			r := runPython(t, Env(baseEnv(extra...), probeDir(t), Options{Socket: l.Path()}), nil, "-c", show)
			if tc.name == "system" {
				if _, err := os.Stat("/usr/lib/python3.11/sitecustomize.py"); err != nil {
					t.Fatalf("this test expects Debian's python3.11 sitecustomize: %v", err)
				}
			}
			if tc.want != "" && string(base.stdout) != tc.want {
				t.Fatalf("baseline stdout %q, want %q", base.stdout, tc.want)
			}
			if tc.name == "raising" && !strings.HasPrefix(string(base.stderr), "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nValueError: broken sitecustomize\n") {
				t.Fatalf("baseline stderr %q", base.stderr)
			}
			if !bytes.Equal(r.stdout, base.stdout) || !bytes.Equal(r.stderr, base.stderr) || r.code != base.code {
				t.Errorf("with probe: exit %d stdout %q stderr %q\nwithout:    exit %d stdout %q stderr %q",
					r.code, r.stdout, r.stderr, base.code, base.stdout, base.stderr)
			}
			msgs := collect(t, l, r.pid)
			if len(byType(msgs, r.pid, TypeHello)) != 1 {
				t.Errorf("probe did not start")
			}
		})
	}
}
