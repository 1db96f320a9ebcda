package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeDemo returns the README's two demo runs (the first, which dies,
// and the resume) as shell command lines, bin/vramguard as README has it.
func readmeDemo(t *testing.T) (first, resume string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		_, cmd, chained := strings.Cut(l, "&& ")
		switch {
		case chained && strings.HasPrefix(cmd, "bin/vramguard run --name demo "):
			first = cmd
		case strings.HasPrefix(l, "bin/vramguard run --name demo2 "):
			resume = l
		}
	}
	if first == "" || resume == "" {
		t.Fatalf("README.md's quick start lacks the demo (%q) or its resume (%q)", first, resume)
	}
	return first, resume
}

// TestReadmeDemo runs the README's demo as a user with TMPDIR set would:
// the first run dies on the checkpoint it cut short, and the resume must
// start from a checkpoint the demo wrote, under TMPDIR.
func TestReadmeDemo(t *testing.T) {
	t.Parallel()
	first, resume := readmeDemo(t)
	e := newEnv(t)
	tmp := t.TempDir()
	// bin/vramguard and python3, as a checkout with Debian's python3 has them.
	work := t.TempDir()
	for _, l := range []struct{ link, target string }{
		{"bin/vramguard", bin}, {"py/python3", python},
	} {
		os.MkdirAll(filepath.Join(work, filepath.Dir(l.link)), 0o755)
		if err := os.Symlink(l.target, filepath.Join(work, l.link)); err != nil {
			t.Fatal(err)
		}
	}
	examples, _ := filepath.Abs(filepath.Join("..", "examples"))
	if err := os.Symlink(examples, filepath.Join(work, "examples")); err != nil {
		t.Fatal(err)
	}
	sh := func(line string) (string, int) {
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir = work
		cmd.Env = append(e.environ(), "TMPDIR="+tmp, "PATH="+filepath.Join(work, "py")+":"+os.Getenv("PATH"))
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := sh(first); code == 0 || !strings.Contains(out, "corrupt_checkpoint") {
		t.Fatalf("the demo (%s) should die on its torn checkpoint: exit %d\n%s", first, code, out)
	}
	out, code := sh(resume)
	if code != 0 {
		t.Fatalf("the resume (%s): exit %d\n%s", resume, code, out)
	}
	from := e.explain("demo2")["resume"]
	dir := filepath.Join(tmp, "vramguard-demo")
	if !strings.Contains(out, "resumed from "+dir+"/epoch-002.ckpt") {
		t.Errorf("the resume did not start from the demo's last valid checkpoint under TMPDIR (%s):\n%s\nresume: %v", dir, out, from)
	}
}
