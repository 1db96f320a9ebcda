package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// firstAttemptJob fails once after saving a checkpoint into ckpts (which it
// creates, as training scripts do); given a checkpoint path as argv[1], it
// prints it and succeeds.
const firstAttemptJob = `
import os, struct, sys
if len(sys.argv) > 1 and sys.argv[1]:
    print("resumed from", sys.argv[1])
    sys.exit(0)
os.makedirs("ckpts", exist_ok=True)
hdr = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
with open("ckpts/epoch=1-step=10.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hdr)) + hdr + bytes(8))
print("fresh start, saved")
sys.exit(1)
`

// TestResumeFromMissingDir (issue #26): the first run of an auto-resume
// setup, whose --resume-from directory the job itself creates, starts
// fresh and says so; the next attempt looks there again and resumes from
// the checkpoint the first one saved. A path that exists and is not a
// directory stays an error.
func TestResumeFromMissingDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	work := t.TempDir()
	r := e.runIn(work, nil, "run", "--restart", "on-failure", "--stable-after", "1ms", "--backoff", "10ms", "--max-restarts", "1",
		"--resume-from", "ckpts", "--", python, "-c", firstAttemptJob, "{resume}")
	if r.code != 0 || !strings.Contains(r.stdout, "fresh start, saved") || !strings.Contains(r.stdout, "resumed from ./ckpts/epoch=1-step=10.safetensors\n") {
		t.Fatalf("exit %d, want 0, a fresh first attempt and a second that resumed from ./ckpts/...\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "ckpts does not exist yet (nothing to resume)") {
		t.Errorf("the fresh start is not explained:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, "WARNING") {
		t.Errorf("a directory that does not exist yet is no warning:\n%s", r.stderr)
	}

	file := filepath.Join(work, "afile")
	os.WriteFile(file, nil, 0o600)
	r = e.runIn(work, nil, "run", "--resume-from", file, "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "not a directory") {
		t.Errorf("--resume-from FILE: exit %d, want 2 and 'not a directory':\n%s", r.code, r.stderr)
	}
}

// TestResumeSafeSubstitution (issue #26): {resume} carries only a path of
// plain characters, never starting with '-' (./NAME under --resume-from .):
// a checkpoint named like a tar option reaches tar as a file; a name with
// shell syntax is refused (exit 2, pointing at $VRAMGUARD_RESUME) through
// programs the program-aware refusal does not know (env -S, xargs sh -c,
// perl -e, awk), and nothing it names runs.
func TestResumeSafeSubstitution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// --resume-from .: the ./ is kept, so tar reads a file, not an option
	dot := t.TempDir()
	writeSafetensors(t, filepath.Join(dot, "--use-compress-program=sh.safetensors"))
	r := e.runIn(dot, nil, "run", "--resume-from", ".", "--", "tar", "-cf", filepath.Join(t.TempDir(), "out.tar"), "{resume}")
	if r.code != 0 {
		t.Errorf("tar of ./--use-compress-program=...: exit %d\n%s", r.code, r.stderr)
	}
	r = e.runIn(dot, nil, "run", "--resume-from", ".", "--", "/bin/echo", "{resume}")
	if r.stdout != "./--use-compress-program=sh.safetensors\n" {
		t.Errorf("{resume} under --resume-from . is %q, want ./--use-compress-program=sh.safetensors", r.stdout)
	}

	ck := t.TempDir()
	writeSafetensors(t, filepath.Join(ck, "ck;touch pwned;.pt"))
	work := t.TempDir()
	for _, argv := range [][]string{
		{"env", "-S", "sh -c 'echo {resume}'"},
		{"sh", "-c", "echo x | xargs sh -c \"$0\"", "echo {resume}"},
		{"perl", "-e", "system('echo {resume}')"},
		{"awk", "BEGIN{system(\"echo {resume}\")}"},
		{"ionice", "-c3", "sh", "-c", "echo {resume}"},
		{"/bin/echo", "{resume}"},
	} {
		r := e.runIn(work, nil, append([]string{"run", "--resume-from", ck, "--"}, argv...)...)
		if _, err := os.Stat(filepath.Join(work, "pwned")); err == nil {
			t.Fatalf("%q: the checkpoint's name ran as code (exit %d)\n%s", argv, r.code, r.stderr)
		}
		if r.code != 2 || !strings.Contains(r.stderr, "VRAMGUARD_RESUME") || !strings.Contains(r.stderr, `holds ';'`) {
			t.Errorf("%q: exit %d, want 2 with the reason and $VRAMGUARD_RESUME; stderr:\n%s", argv, r.code, r.stderr)
		}
	}
	// the environment carries the same name verbatim
	r = e.runIn(work, nil, "run", "--resume-from", ck, "--", "sh", "-c", `printf '%s\n' "$VRAMGUARD_RESUME"`)
	if r.code != 0 || r.stdout != filepath.Join(ck, "ck;touch pwned;.pt")+"\n" {
		t.Errorf("$VRAMGUARD_RESUME: exit %d stdout %q", r.code, r.stdout)
	}
}
