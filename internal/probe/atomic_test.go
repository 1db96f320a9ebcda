package probe

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, python, testdata(t, "scripts/save_kill.py"), ckpt)
			cmd.Env = env
			stdin, err := cmd.StdinPipe() // kept open: the blocker waits on it
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			var lines []string
			for sc.Scan() {
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

			// Load it with torch in a fresh process (no probe), as a
			// resume would.
			r := runPython(t, baseEnv(), nil, testdata(t, "scripts/load_ckpt.py"), ckpt)
			var got loaded
			r.lastJSON(t, &got)
			n := 8 << 20
			wantSum := float64(n) * float64(n-1) / 2
			if atomic {
				if !got.OK || got.Marker != "first" || got.N != n || got.Sum != wantSum {
					t.Fatalf("previous checkpoint not intact after SIGKILL mid-save: %+v", got)
				}
				// The killed save's staging directory is left behind,
				// and the next atomic save in that directory removes it.
				stale, _ := filepath.Glob(filepath.Join(dir, ".vramguard-save-*"))
				if len(stale) != 1 {
					t.Fatalf("staging dirs after the kill: %v", stale)
				}
				env := Env(baseEnv("RESAVE=1"), probeDir(t), Options{AtomicSave: true})
				r := runPython(t, env, nil, testdata(t, "scripts/load_ckpt.py"), ckpt)
				if r.code != 0 {
					t.Fatalf("resave: %s", r.stderr)
				}
				if stale, _ := filepath.Glob(filepath.Join(dir, ".vramguard-save-*")); len(stale) != 0 {
					t.Errorf("staging dirs after the next save: %v", stale)
				}
				entries, _ := os.ReadDir(dir)
				if len(entries) != 1 {
					t.Errorf("dir holds %d entries, want just model.pt", len(entries))
				}
			} else if got.OK {
				t.Fatalf("control: a plain save killed midway left a loadable file (%+v); the test would not tell atomic from plain", got)
			}
		})
	}
}
