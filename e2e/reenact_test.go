package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestReenactments replays the re-enactments of internal/diagnose/testdata/
// reenact (messages of classes once read wrong, each with its verdict as a
// golden file) through a real process under `vramguard run --json`: the
// output written to stderr, then the exit status or the signal the file
// gives. The post-mortem must be the golden verdict: what the classifier
// concluded from the text alone holds for the tail the supervisor read from
// a real pipe. Files whose end needs the supervisor's own inputs (a signal
// it was sent, a scheduler's line) are covered by their unit test and by
// TestSchedulerTimeLimit.
func TestReenactments(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "internal", "diagnose", "testdata", "reenact")
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) < 20 {
		t.Fatalf("%d re-enactments: %v", len(files), err)
	}
	tmp := t.TempDir()
	script := filepath.Join(tmp, "replay.py")
	// as replayPy, which cannot reset SIGKILL's disposition (nor needs to)
	py := strings.Replace(replayPy, "    signal.signal(plan[\"signal\"], signal.SIG_DFL)\n",
		"    if plan[\"signal\"] != signal.SIGKILL:\n        signal.signal(plan[\"signal\"], signal.SIG_DFL)\n", 1)
	if py == replayPy {
		t.Fatal("replayPy changed: adapt the SIGKILL case")
	}
	if err := os.WriteFile(script, []byte(py), 0o644); err != nil {
		t.Fatal(err)
	}
	type run struct {
		name   string
		exit   int
		signal syscall.Signal
		skip   bool
		golden diagnose.Verdict
	}
	runs := make([]*run, len(files))
	cmds := make([]*exec.Cmd, len(files))
	for i, f := range files {
		r := &run{name: strings.TrimSuffix(filepath.Base(f), ".txt"), exit: 1}
		runs[i] = r
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		head, body, ok := strings.Cut(string(b), "--8<-- output\n")
		if !ok {
			t.Fatalf("%s: no output section", f)
		}
		for _, l := range strings.Split(head, "\n") {
			switch {
			case strings.HasPrefix(l, "exit: "):
				r.exit, _ = strconv.Atoi(l[len("exit: "):])
			case strings.HasPrefix(l, "signal: "):
				r.signal = map[string]syscall.Signal{"SIGABRT": syscall.SIGABRT, "SIGKILL": syscall.SIGKILL, "SIGSEGV": syscall.SIGSEGV,
					"SIGBUS": syscall.SIGBUS, "SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT}[l[len("signal: "):]]
			case strings.HasPrefix(l, "stop: "), strings.HasPrefix(l, "scheduler: "), strings.HasPrefix(l, "interrupted: "), strings.HasPrefix(l, "deadline-in: "):
				r.skip = true
			}
		}
		gb, err := os.ReadFile(strings.TrimSuffix(f, ".txt") + ".golden.json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(gb, &r.golden); err != nil {
			t.Fatal(err)
		}
		if r.skip {
			continue
		}
		plan, _ := json.Marshal(map[string]any{"exit": r.exit, "signal": int(r.signal), "chunks": []map[string]any{{"fd": 2, "text": body}}})
		p := filepath.Join(tmp, r.name+".json")
		if err := os.WriteFile(p, plan, 0o644); err != nil {
			t.Fatal(err)
		}
		cmds[i] = testbin.Vramguard(t, newEnv(t).environ(), "run", "--json", "--no-probe", "--", python, script, p)
	}
	outs := runAll(cmds, 8)
	for i, r := range runs {
		if r.skip {
			continue
		}
		o := &outs[i]
		t.Run(r.name, func(t *testing.T) {
			var ee *exec.ExitError
			if o.err != nil && !errors.As(o.err, &ee) {
				t.Fatalf("vramguard run: %v\n%s", o.err, o.stderr.String())
			}
			var v diagnose.Verdict
			if err := json.Unmarshal(o.stdout.Bytes(), &v); err != nil {
				t.Fatalf("run --json: %v\n%s\n%s", err, o.stdout.String(), o.stderr.String())
			}
			g := r.golden
			if v.Reason != g.Reason || v.Summary != g.Summary || v.ExceptionType != g.ExceptionType || v.ExitCode != g.ExitCode {
				t.Errorf("run: %s %q (%s) exit %d; the classifier on the text: %s %q (%s) exit %d",
					v.Reason, v.Summary, v.ExceptionType, v.ExitCode, g.Reason, g.Summary, g.ExceptionType, g.ExitCode)
			}
			// the supervisor may add its own evidence after the classifier's
			if len(v.Evidence) < len(g.Evidence) || !reflect.DeepEqual(v.Evidence[:len(g.Evidence)], g.Evidence) {
				t.Errorf("evidence:\n%s\nwant first:\n%s", strings.Join(v.Evidence, "\n"), strings.Join(g.Evidence, "\n"))
			}
			// and advice of its own after the classifier's (what a
			// scheduler's end lost)
			if !reflect.DeepEqual(v.OOM, g.OOM) || len(v.Advice) < len(g.Advice) || !reflect.DeepEqual(v.Advice[:len(g.Advice)], g.Advice) {
				t.Errorf("oom %+v advice %q, want %+v %q", v.OOM, v.Advice, g.OOM, g.Advice)
			}
		})
	}
}
