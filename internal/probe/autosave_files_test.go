package probe

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// What testdata/scripts/autosave_files.py reports.
type afCell struct {
	Src, Stdout, Stderr string
	OK                  bool
}

type afFacts struct {
	TheirDir      afCell    `json:"their_dir"`
	TheirDirFiles []string  `json:"their_dir_files"`
	WritableDir   afCell    `json:"writable_dir"`
	Precious      string    `json:"precious"`
	Saved         []float64 `json:"saved"`
	RestoreDir    afCell    `json:"restore_dir"`
	Restored      []float64 `json:"restored"`
	Fresh         []float64 `json:"fresh"`
	RestoreTheirs afCell    `json:"restore_theirs"`
	AfterTheirs   []float64 `json:"after_theirs"`
	Save          afCell    `json:"save"`
	Restore       afCell    `json:"restore"`
}

func (c afCell) oneUsageError() bool {
	out := strings.TrimSpace(c.Stdout + c.Stderr)
	return !c.OK && strings.HasPrefix(out, "UsageError: ") && !strings.Contains(out, "\n")
}

// throwawayUser adds a fresh login-less user (prefix and this process's
// PID), removed when the test ends, and returns its UID.
func throwawayUser(t *testing.T, prefix string) int {
	t.Helper()
	testbin.NeedRoot(t, "this test adds a user and runs a process as it")
	return testbin.User(t, prefix+strconv.Itoa(os.Getpid()%100000))
}

func runAutosaveFiles(t *testing.T, dir string, env []string, args ...string) (afFacts, result) {
	t.Helper()
	e := Env(baseEnv(append([]string{"IPYTHONDIR=" + filepath.Join(t.TempDir(), "ipython")}, env...)...), probeDir(t), Options{})
	cmd := pythonCmd(t, e, append([]string{testdata(t, "scripts/autosave_files.py")}, args...)...)
	if dir != "" {
		cmd.Dir = dir
	}
	var r result
	out, err := cmd.Output()
	r.stdout = out
	if ee, ok := err.(*exec.ExitError); ok {
		r.stderr, r.code = ee.Stderr, ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var f afFacts
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			break
		}
	}
	return f, r
}

// TestAutosaveForeignFiles: another real user (a throwaway account, acting
// through setpriv) plants what a shared scratch directory allows: the
// directory --dir names, symlinks at every name the next saves can take
// (pointing at a file of the notebook's user), a newer autosave beside the
// user's own. autosave refuses a directory another user owns or others can
// write, so nothing is written there or through the links; restore DIR
// loads the user's own newest and names the other's as skipped; restore of
// the other user's file by its path is refused.
func TestAutosaveForeignFiles(t *testing.T) {
	t.Parallel()
	uid := throwawayUser(t, "vgnb")
	// a directory the other user can enter, as /tmp
	work, err := os.MkdirTemp("", "vgnb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	f, r := runAutosaveFiles(t, "", []string{"JPY_SESSION_NAME=train.ipynb"}, "foreign", work, strconv.Itoa(uid))
	if r.code != 0 {
		t.Fatalf("autosave_files.py foreign: exit %d\n%s", r.code, r.stderr)
	}
	cases := []struct {
		name string
		ok   bool
		why  string
	}{
		{"a directory another user made", f.TheirDir.oneUsageError() && strings.Contains(f.TheirDir.Stderr+f.TheirDir.Stdout, fmt.Sprintf("uid %d", uid)) && len(f.TheirDirFiles) == 0,
			fmt.Sprintf("%+v, files there %v", f.TheirDir, f.TheirDirFiles)},
		{"symlinks at the next names", f.WritableDir.oneUsageError() && strings.Contains(f.WritableDir.Stderr, "writable by others") && f.Precious == "precious",
			fmt.Sprintf("%+v, the linked file now holds %q", f.WritableDir, f.Precious)},
		{"restore DIR beside another user's newer file", f.RestoreDir.OK && fmt.Sprint(f.Restored) == fmt.Sprint(f.Saved) &&
			strings.Contains(f.RestoreDir.Stdout, "owned by vgnb"), fmt.Sprintf("%+v: restored %v, saved %v", f.RestoreDir, f.Restored, f.Saved)},
		{"another user's file by its path", f.RestoreTheirs.oneUsageError() && fmt.Sprint(f.AfterTheirs) == fmt.Sprint(f.Fresh),
			fmt.Sprintf("%+v: weights %v, before %v", f.RestoreTheirs, f.AfterTheirs, f.Fresh)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !c.ok {
				t.Error(c.why)
			}
		})
	}
}

// TestAutosaveTwoNotebooks: two notebooks in one directory autosave with the
// default --dir (vramguard-autosave, beside both) and --keep 1: neither
// prunes the other's file, and a later kernel of the first restores its own
// weights from the directory, not the second's newer ones.
func TestAutosaveTwoNotebooks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, r := runAutosaveFiles(t, dir, []string{"JPY_SESSION_NAME=a.ipynb"}, "save", "1")
	if r.code != 0 || !a.Save.OK {
		t.Fatalf("a: exit %d %+v\n%s", r.code, a.Save, r.stderr)
	}
	b, r := runAutosaveFiles(t, dir, []string{"JPY_SESSION_NAME=b.ipynb"}, "save", "2")
	if r.code != 0 || !b.Save.OK {
		t.Fatalf("b: exit %d %+v\n%s", r.code, b.Save, r.stderr)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "vramguard-autosave", "autosave-*.pt"))
	var ofA, ofB int
	for _, p := range files {
		switch {
		case strings.HasPrefix(filepath.Base(p), "autosave-a-"):
			ofA++
		case strings.HasPrefix(filepath.Base(p), "autosave-b-"):
			ofB++
		}
	}
	if ofA != 1 || ofB != 1 {
		t.Errorf("files %v: want one of each notebook", files)
	}
	a2, r := runAutosaveFiles(t, dir, []string{"JPY_SESSION_NAME=a.ipynb"}, "restore")
	if r.code != 0 || !a2.Restore.OK || fmt.Sprint(a2.Restored) != fmt.Sprint(a.Saved) {
		t.Errorf("a's next kernel restored %v (%+v); a saved %v, b %v", a2.Restored, a2.Restore, a.Saved, b.Saved)
	}
}

// TestAutosaveKilledMidSave: a kernel SIGKILLed while an autosave is being
// written leaves its previous autosave whole: the next kernel restores it.
func TestAutosaveKilledMidSave(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, r := runAutosaveFiles(t, dir, []string{"JPY_SESSION_NAME=k.ipynb"}, "killsave")
	if r.code != -1 && r.code != 137 {
		t.Fatalf("killsave: exit %d, want death by SIGKILL\n%s", r.code, r.stderr)
	}
	if !k.Save.OK {
		t.Fatalf("the first autosave: %+v", k.Save)
	}
	next, r := runAutosaveFiles(t, dir, []string{"JPY_SESSION_NAME=k.ipynb"}, "restore")
	if r.code != 0 || !next.Restore.OK || fmt.Sprint(next.Restored) != fmt.Sprint(k.Saved) {
		t.Errorf("after the kill: restored %v (%+v), saved before it %v", next.Restored, next.Restore, k.Saved)
	}
}
