package probe

import (
	"archive/zip"
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

type loaded struct {
	OK     bool    `json:"ok"`
	Marker string  `json:"marker"`
	Sum    float64 `json:"sum"`
	N      int     `json:"n"`
	Error  string  `json:"error"`
}

// SIGKILL in the middle of a large torch.save to a path that already holds
// a checkpoint: with AtomicSave the previous checkpoint is still loadable by
// torch; without it (the control) it is destroyed. The kill lands while the
// save is pickling, after torch has opened its output file: the script's
// object blocks there and says so on stdout.
func TestAtomicSaveSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	for _, atomic := range []bool{true, false} {
		name := map[bool]string{true: "atomic", false: "plain"}[atomic]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ckpt := filepath.Join(dir, "model.pt")
			l := listen(t)
			env := Env(baseEnv(), probeDir(t), Options{Socket: l.Path(), AtomicSave: atomic})

			cmd := pythonCmd(t, env, testdata(t, "scripts/save_kill.py"), ckpt)
			pipes := testbin.StartPiped(t, cmd)
			defer pipes.Stdin.Close() // kept open until then: the blocker waits on it
			stdout, stderr := pipes.Stdout, pipes.Stderr
			sc := bufio.NewScanner(stdout)
			var lines []string
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "pid ") {
					continue
				}
				lines = append(lines, sc.Text())
				if sc.Text() == "saving second" {
					break
				}
			}
			if len(lines) != 2 || lines[0] != "first saved" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("script said %q\nstderr:\n%s", lines, stderr.String())
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, stdout)
			cmd.Wait()
			if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("process ended with %v, not SIGKILL", cmd.ProcessState)
			}
			msgs := collect(t, l, cmd.Process.Pid)
			cks := byType(msgs, cmd.Process.Pid, TypeCkpt)
			if len(cks) != 1 || cks[0].Atomic != atomic || cks[0].Bytes == nil || *cks[0].Bytes < 32<<20 {
				t.Errorf("want one ckpt event for the first save (atomic=%v), got %+v", atomic, cks)
			}

			if !atomic {
				// The control: a plain save killed midway has already
				// destroyed the previous checkpoint (torch truncated it
				// when it opened the file). Checked without torch: it is
				// no longer the zip archive torch.load needs.
				if zr, err := zip.OpenReader(ckpt); err == nil {
					zr.Close()
					t.Fatalf("control: a plain save killed midway left a readable archive; the test would not tell atomic from plain")
				}
				return
			}
			// Load it with torch, as a resume would, and save it again
			// atomically: the killed save's staging directory is removed
			// by the next atomic save in that directory.
			if stale, _ := filepath.Glob(filepath.Join(dir, ".vramguard-save-*")); len(stale) != 1 {
				t.Fatalf("staging dirs after the kill: %v", stale)
			}
			r := runPython(t, Env(baseEnv("RESAVE=1"), probeDir(t), Options{AtomicSave: true}), nil, testdata(t, "scripts/load_ckpt.py"), ckpt)
			var got loaded
			r.lastJSON(t, &got)
			n := 8 << 20
			wantSum := float64(n) * float64(n-1) / 2
			if r.code != 0 || !got.OK || got.Marker != "first" || got.N != n || got.Sum != wantSum {
				t.Fatalf("previous checkpoint not intact after SIGKILL mid-save: %+v\n%s", got, r.stderr)
			}
			if stale, _ := filepath.Glob(filepath.Join(dir, ".vramguard-save-*")); len(stale) != 0 {
				t.Errorf("staging dirs after the next save: %v", stale)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("dir holds %d entries, want just model.pt", len(entries))
			}
		})
	}
}
