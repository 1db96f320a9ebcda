package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreHostile: `%vramguard restore` on files built to run code as
// they load (testdata/scripts/restore_hostile.py): legacy-format files whose
// first pickles call exec after an opcode torch's weights-only reader lacks,
// zip archives whose data.pkl does the same, a TorchScript archive whose
// __setstate__ prints, and a truncated autosave. Nothing in any of them
// runs, each is refused in one line, and a real autosave with an optimizer
// (floats, which torch 1.x's weights-only reader lacks) still loads.
func TestRestoreHostile(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	env := Env(baseEnv("IPYTHONDIR="+filepath.Join(work, "ipython")), probeDir(t), Options{})
	r := runPython(t, env, nil, testdata(t, "scripts/restore_hostile.py"), work)
	if r.code != 0 {
		t.Fatalf("restore_hostile.py: exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	var rep struct {
		Cases []struct {
			Name, Path, Stdout, Stderr string
			Fired, OK                  bool
		}
		Good struct {
			Stdout, Stderr string
			OK, Same       bool
			LR             float64
		}
		Marker string
	}
	r.lastJSON(t, &rep)
	if len(rep.Cases) != 6 {
		t.Fatalf("%d cases, want 6", len(rep.Cases))
	}
	lines := strings.Split(strings.TrimSpace(string(r.stdout)), "\n")
	if strings.Contains(strings.Join(lines[:len(lines)-1], "\n"), rep.Marker) || strings.Contains(string(r.stderr), rep.Marker) {
		t.Errorf("the TorchScript archive's __setstate__ ran:\n%s", r.stdout)
	}
	for _, c := range rep.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Fired {
				t.Errorf("restore ran the file's code (its flag file exists)")
			}
			out := strings.TrimSpace(c.Stdout + c.Stderr)
			if c.OK || !strings.HasPrefix(out, "UsageError: restore: ") || strings.Contains(out, "\n") || strings.Contains(out, rep.Marker) {
				t.Errorf("want one UsageError line, got %q", out)
			}
		})
	}
	entries, _ := os.ReadDir(work)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "fired-") {
			t.Errorf("a flag file exists: %s", e.Name())
		}
	}
	if !rep.Good.OK || !rep.Good.Same || rep.Good.LR != 0.01 || !strings.Contains(rep.Good.Stdout, "opt: loaded into Adam") {
		t.Errorf("a real autosave with an optimizer: %+v", rep.Good)
	}
}
