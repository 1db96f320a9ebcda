package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// adaptations returns explain --json's adaptations as "after_reason:
// name from→to, ..." strings, in order.
func adaptations(t *testing.T, doc map[string]any) []string {
	t.Helper()
	var out []string
	list, _ := doc["adaptations"].([]any)
	for _, x := range list {
		st := x.(map[string]any)
		ch := st["changes"].(map[string]any)
		var parts []string
		for _, name := range []string{"batch", "accum", "workers", "alloc_conf"} {
			if c, ok := ch[name].([]any); ok {
				parts = append(parts, fmt.Sprintf("%s %v→%v", name, c[0], c[1]))
			}
		}
		out = append(out, fmt.Sprintf("%v@%v: %s", st["after_reason"], st["attempt"], strings.Join(parts, ", ")))
	}
	return out
}

// TestAdaptBatchAfterCUDAOOM: a job that runs out of GPU memory whenever
// its batch is above 16 completes under --adapt --batch 64 after two
// adaptations (64→32→16, accum 1→2→4), each attempt resuming from the
// newest valid checkpoint; explain --json lists them.
func TestAdaptBatchAfterCUDAOOM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ck := t.TempDir()
	r := e.run("run", "--name", "fit", "--restart", "on-failure", "--backoff", "50ms", "--adapt", "--batch", "64",
		"--resume-from", ck, "--", python, job("adapt_train.py"),
		"--batch-size", "{batch}", "--grad-accum", "{accum}", "--resume", "{resume}", "--ckpt", ck)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"adapting: attempt 2 after cuda_oom: batch 64→32, accum 1→2",
		"adapting: attempt 3 after cuda_oom: batch 32→16, accum 2→4",
		"the settings that fit: batch 16, accum 4, after 2 adaptations",
		"attempt 2 resumes from " + filepath.Join(ck, "epoch-001.pt"),
		"attempt 3 resumes from " + filepath.Join(ck, "epoch-002.pt"),
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	for n, want := range map[int]string{
		1: "attempt 1: batch 64 accum 1 env batch 64",
		2: "attempt 2: batch 32 accum 2 env batch 32",
		3: "attempt 3: batch 16 accum 4 env batch 16",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("attempt %d did not run with its settings: stdout lacks %q", n, want)
		}
	}
	if !strings.Contains(r.stdout, "resumed from "+filepath.Join(ck, "epoch-002.pt")+" at epoch 2") || !strings.Contains(r.stdout, "training done") {
		t.Errorf("the last attempt did not resume and finish:\n%s", r.stdout)
	}
	doc := e.explain("fit")
	got := adaptations(t, doc)
	want := []string{"cuda_oom@2: batch 64→32, accum 1→2", "cuda_oom@3: batch 32→16, accum 2→4"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("explain adaptations = %q, want %q", got, want)
	}
	if s, _ := doc["settings"].(map[string]any); fmt.Sprint(s["batch"], s["accum"]) != "16 4" {
		t.Errorf("final settings = %v", doc["settings"])
	}
	detail := doc["attempts_detail"].([]any)
	if len(detail) != 3 {
		t.Fatalf("%d attempts", len(detail))
	}
	for i, wantFrom := range []string{"", "epoch-001.pt", "epoch-002.pt"} {
		a := detail[i].(map[string]any)
		if from := fmt.Sprint(a["resume_from"]); filepath.Base(from) != wantFrom && !(wantFrom == "" && from == "") {
			t.Errorf("attempt %d resumed from %q, want %s", i+1, from, wantFrom)
		}
	}
	text := e.run("explain", "fit").stdout
	if !strings.Contains(text, "attempt 3 after cuda_oom: batch 32→16, accum 2→4") || !strings.Contains(text, "settings that fit: batch 16, accum 4") {
		t.Errorf("explain does not list the adaptations:\n%s", text)
	}

	// --adapt-remember (on with --name): the next run of that name starts
	// from what fit, and says so.
	ck2 := t.TempDir()
	r = e.run("run", "--name", "fit", "--restart", "on-failure", "--adapt", "--batch", "64",
		"--", python, job("adapt_train.py"), "--batch-size", "{batch}", "--grad-accum", "{accum}", "--ckpt", ck2, "--epochs", "2")
	if r.code != 0 || !strings.Contains(r.stderr, `starting from the settings that fit run`) || !strings.Contains(r.stdout, "attempt 1: batch 16 accum 4") {
		t.Errorf("second run did not start from the remembered settings (exit %d):\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "adapting:") {
		t.Errorf("the remembered settings had to adapt again:\n%s", r.stderr)
	}
}

// TestAdaptFragmentationFirst: an OOM whose numbers say fragmentation gets
// the allocator setting first (max_split_size_mb on this torch 1.13, sized
// from the request), same batch; the next attempt's environment has it.
func TestAdaptFragmentationFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ck := t.TempDir()
	r := e.run("run", "--name", "frag", "--restart", "on-failure", "--backoff", "50ms", "--adapt", "--batch", "8",
		"--", python, job("adapt_train.py"), "--batch-size", "{batch}", "--ckpt", ck, "--epochs", "2", "--fragmented")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "attempt 2: batch 8 accum 1 env batch 8 PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:2048") {
		t.Errorf("attempt 2's environment lacks the allocator setting:\n%s", r.stdout)
	}
	got := adaptations(t, e.explain("frag"))
	if len(got) != 1 || got[0] != "cuda_oom@2: alloc_conf →max_split_size_mb:2048" {
		t.Errorf("adaptations = %q", got)
	}
}

// TestAdaptShmFewerWorkers: a DataLoader with 4 workers under a /dev/shm
// too small for their batches (a private 4 MiB tmpfs in a mount namespace)
// completes once the workers are cut (4→2→1→0 at most).
func TestAdaptShmFewerWorkers(t *testing.T) {
	t.Parallel()
	testbin.NeedRoot(t, "this test mounts a small /dev/shm")
	e := newEnv(t)
	script := fmt.Sprintf("mount -t tmpfs -o size=4m tmpfs /dev/shm && exec %s run --name shm --restart on-failure --backoff 50ms --adapt --workers 4 -- %s %s {workers}",
		bin, python, job("adapt_loader.py"))
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = e.environ()
	r := testbin.Run(t, cmd)
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	got := adaptations(t, e.explain("shm"))
	if len(got) == 0 || got[0] != "shm_exhausted@2: workers 4→2" {
		t.Fatalf("adaptations = %q\n%s", got, r.Stderr)
	}
	for _, st := range got[1:] {
		if !strings.HasPrefix(st, "shm_exhausted@") || !strings.Contains(st, "workers ") {
			t.Errorf("a later adaptation was not about workers after shm: %q", st)
		}
	}
	if !strings.Contains(r.Stdout, "done: 12 batches with") {
		t.Errorf("the job did not finish: %s", r.Stdout)
	}
}

// TestAdaptHostOOMFewerWorkers: the same loader whose workers each hold
// 200 MiB, under --memory-limit 600m: the kernel's OOM killer ends the
// 4-worker attempt; fewer workers fit.
func TestAdaptHostOOMFewerWorkers(t *testing.T) {
	t.Parallel()
	testbin.NeedRoot(t, "this test makes a memory cgroup")
	e := newEnv(t)
	r := e.run("run", "--name", "hostoom", "--memory-limit", "600m", "--restart", "on-failure", "--backoff", "50ms",
		"--adapt", "--workers", "4", "--", python, job("adapt_loader.py"), "{workers}", "--ballast", "200")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	got := adaptations(t, e.explain("hostoom"))
	if len(got) == 0 || got[0] != "host_oom_killed@2: workers 4→2" {
		t.Fatalf("adaptations = %q\n%s", got, r.stderr)
	}
	if !strings.Contains(r.stdout, "done: 12 batches with") {
		t.Errorf("the job did not finish: %s", r.stdout)
	}
}

// TestAdaptRefusals: --adapt needs restarts; placeholders need their flags;
// the flags need --adapt.
func TestAdaptRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--adapt", "--batch", "8", "--", "true", "{batch}"}, "add --restart on-failure"},
		{[]string{"--restart", "on-failure", "--adapt", "--", "true", "{batch}"}, "uses {batch} but --batch is not given"},
		{[]string{"--batch", "8", "--", "true"}, "--batch works with --adapt only"},
		{[]string{"--", "true", "--bs", "{batch}"}, "only --adapt fills"},
		{[]string{"--restart", "on-failure", "--adapt", "--batch", "8", "--min-batch", "16", "--", "true"}, "--min-batch 16 is above --batch 8"},
		{[]string{"--restart", "on-failure", "--adapt", "--adapt-remember", "--batch", "8", "--", "true"}, "give the run a --name"},
	} {
		r := e.run(append([]string{"run"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("run %q: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// TestAdaptNoEffect: a command that ignores the placeholders runs out of
// memory the same way at every batch: the run stops after --max-restarts
// and its post-mortem says the adaptation had no effect.
func TestAdaptNoEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ck := t.TempDir()
	r := e.run("run", "--name", "deaf", "--restart", "on-failure", "--max-restarts", "2", "--backoff", "50ms",
		"--adapt", "--batch", "64", "--", python, job("adapt_train.py"), "--batch-size", "64", "--ckpt", ck)
	if r.code == 0 {
		t.Fatalf("a job that always runs out of memory succeeded\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "--max-restarts 2 reached") {
		t.Errorf("did not stop at --max-restarts:\n%s", r.stderr)
	}
	doc := e.explain("deaf")
	ev := strings.Join(strs(doc["evidence"]), "\n")
	if !strings.Contains(ev, "the adaptation had no effect: with batch 16 the job asked for 4 GiB again, exactly as with batch 32") {
		t.Errorf("evidence does not say the adaptation had no effect:\n%s", ev)
	}
	if !strings.Contains(r.stderr, "the adaptation had no effect") {
		t.Errorf("the terminal post-mortem does not say so:\n%s", r.stderr)
	}
}
