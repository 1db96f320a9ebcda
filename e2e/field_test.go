package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/diagnose/field"
	"github.com/vramguard/vramguard/internal/testbin"
)

// replayPy re-enacts one message of the field corpus: it writes the output
// to the streams the original wrote it to, in the same order (pausing when it
// switches streams, so the supervisor reads them in that order), then exits
// with the original's status or dies of its signal. Plain python3: no torch.
const replayPy = `import json, os, resource, signal, sys, time
plan = json.load(open(sys.argv[1], encoding="utf-8"))
chunks = plan["chunks"]
for i, ch in enumerate(chunks):
    for line in ch["text"].encode("utf-8").splitlines(keepends=True):
        while line:
            line = line[os.write(ch["fd"], line):]
    if i + 1 < len(chunks) and chunks[i + 1]["fd"] != ch["fd"]:
        time.sleep(0.2)
if plan.get("signal"):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(plan["signal"], signal.SIG_DFL)
    os.kill(os.getpid(), plan["signal"])
    time.sleep(5)
sys.exit(plan["exit"])
`

// TestFieldCorpus replays every message of the field corpus
// (internal/diagnose/testdata/field: failure messages users posted in public
// issue threads) through a real process under the built vramguard binary and
// checks the post-mortem of `vramguard run --json`: the reason, the exit
// status, the rank and evidence the corpus names, and every OOM number
// within the rounding of the message's own digits.
func TestFieldCorpus(t *testing.T) {
	t.Parallel()
	cases, err := field.Load(filepath.Join("..", "internal", "diagnose", "testdata", "field"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "replay.py")
	if err := os.WriteFile(script, []byte(replayPy), 0o644); err != nil {
		t.Fatal(err)
	}

	// The runs spend most of their time starting processes and waiting on
	// them, so more of them run at once than there are CPUs.
	cmds := make([]*exec.Cmd, len(cases))
	envs := make([]*env, len(cases))
	for i, c := range cases {
		plan := map[string]any{"exit": c.Exit, "signal": int(c.Signal), "chunks": c.Chunks}
		b, err := json.Marshal(plan)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, c.Name+".json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		// --no-probe: the probe watches torch, which the replay does not
		// import; the output's path (pipes, tail, classifier, post-mortem)
		// is the same, at a quarter less CPU per run.
		envs[i] = newEnv(t)
		cmds[i] = testbin.Vramguard(t, envs[i].environ(), "run", "--json", "--no-probe", "--", python, script, p)
	}
	results := runAll(cmds, 12)

	explained := map[string]bool{}
	for i, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := &results[i]
			var ee *exec.ExitError
			if r.err != nil && !errors.As(r.err, &ee) {
				t.Fatalf("vramguard run: %v\nstderr: %s", r.err, &r.stderr)
			}
			want := c.Exit
			if c.Signal != 0 {
				want = 128 + int(c.Signal)
			}
			if r.code != want {
				t.Errorf("exit status %d, want %d\nstderr: %s", r.code, want, &r.stderr)
			}
			var v diagnose.Verdict
			if err := json.Unmarshal(r.stdout.Bytes(), &v); err != nil {
				t.Fatalf("run --json: %v\nstdout: %s\nstderr: %s", err, &r.stdout, &r.stderr)
			}
			if c.Signal != 0 && (v.Signal == nil || *v.Signal != diagnose.SignalName(c.Signal)) {
				t.Errorf("signal %v, want %s", v.Signal, diagnose.SignalName(c.Signal))
			}
			if o := v.OOM; o != nil && o.TriedBytes != nil && !explained[o.Backend] {
				// the post-mortem people read names the accelerator too
				// (once per backend: explain is another process)
				explained[o.Backend] = true
				title := map[string]string{"cuda": "CUDA", "hip": "ROCm (HIP)", "mps": "Apple MPS"}[c.OOM["backend"]] + " OOM numbers"
				e := envs[i]
				e.t = t
				if out := e.run("explain", "last"); !strings.Contains(out.stdout, title) {
					t.Errorf("explain has no %q:\n%s", title, out.stdout)
				}
			}
			for _, p := range c.CheckVerdict(v) {
				t.Errorf("%s\n  (%s)", p, c.URL)
			}
		})
	}
	if len(explained) != 3 {
		t.Errorf("explain was checked for the backends %v, want cuda, hip and mps", explained)
	}
}
