package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// autosaveTrain is train.py with vramguard.autosave() and no handler of
// its own; it resumes from $VRAMGUARD_RESUME when vramguard found one, and
// notes "T ready PID" and "T resumed PATH STEP" (Adam's step in the file)
// in signals.log.
const autosaveTrain = `import os, sys, time, torch, vramguard
log = open("signals.log", "a", buffering=1)
def note(what):
    log.write("%.3f %s\n" % (time.time(), what))
m = torch.nn.Linear(4, 1)
opt = torch.optim.Adam(m.parameters(), lr=0.01)
r = os.environ.get("VRAMGUARD_RESUME", "")
if r:
    objs = torch.load(r)["objects"]
    m.load_state_dict(objs["model"]); opt.load_state_dict(objs["opt"])
    note("resumed %s %d" % (r, int(opt.state_dict()["state"][0]["step"])))
vramguard.autosave(model=m, opt=opt, dir="ckpt", every="1h", keep=10)
note("ready %d" % os.getpid())
while True:
    m(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
    print("step %d" % int(opt.state_dict()["state"][0]["step"]), flush=True)
    time.sleep(0.05)
`

// TestSlurmAutosaveRequeue: under a real Slurm, scancel --signal=USR1 warns
// a job whose script calls vramguard.autosave(); it saves at its next
// optimizer step and trains on. scontrol requeue then ends it (SIGTERM: a
// save more, then SIGTERM's default) and starts it again as attempt 2 of
// the same run, which resumes with --resume-from from the newest autosave,
// the one attempt 1's post-mortem names, at the step in it.
func TestSlurmAutosaveRequeue(t *testing.T) {
	t.Parallel()
	g := newGraceJob(t, 10, autosaveTrain)
	g.id = g.c.Sbatch(g.work, "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --output=slurm-%j.out\n#SBATCH --requeue\n"+
		`srun "$VRAMGUARD" run --resume-from ckpt -- "$PYTHON" train.py`+"\n")
	g.ready()
	ck := filepath.Join(g.work, "ckpt")
	nameRE := regexp.MustCompile(`^autosave-train-[0-9a-f]{8}-\d{8}-\d{6}-(\d+)\.pt$`)
	saves := func() []string {
		var out []string
		ents, _ := os.ReadDir(ck)
		for _, e := range ents {
			if m := nameRE.FindStringSubmatch(e.Name()); m != nil && m[1] != "0" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	waitFor(t, 60*time.Second, "some steps", func() bool { return strings.Count(g.output(), "step") >= 10 })
	warned := time.Now()
	g.c.Scancel("--signal=USR1", g.id)
	waitFor(t, 30*time.Second, "the save on SIGUSR1", func() bool { return len(saves()) == 1 })
	g.keepsRunning()
	if fi, err := os.Stat(filepath.Join(ck, saves()[0])); err != nil || fi.ModTime().Before(warned) {
		t.Fatalf("the save on the warning %v: %v", fi, err)
	}

	g.requeue()
	var resumed string
	var step int
	for _, l := range strings.Split(g.signals(), "\n") {
		if _, rest, ok := strings.Cut(l, " resumed "); ok {
			fmt.Sscanf(rest, "%s %d", &resumed, &step)
		}
	}
	all := saves() // attempt 1's saves on SIGUSR1 and SIGTERM, attempt 2's first
	if len(all) < 2 {
		t.Fatalf("autosaves %v: want attempt 1's on SIGUSR1 and on SIGTERM", all)
	}
	// attempt 1's post-mortem names the saves on its warnings
	pm, _ := g.endRequeued()
	// attempt 1's saves on its warnings, as the run's timeline has them
	bySignal := map[string]string{}
	events, _ := pm["events"].([]any)
	for _, e := range events {
		e, _ := e.(map[string]any)
		d, _ := e["data"].(map[string]any)
		if e["kind"] == "checkpoint" && e["attempt"] == float64(1) && d["signal"] != nil {
			bySignal[fmt.Sprint(d["signal"])] = filepath.Base(fmt.Sprint(d["path"]))
		}
	}
	if bySignal["SIGUSR1"] != all[0] || bySignal["SIGTERM"] == "" {
		t.Fatalf("attempt 1's saves on warnings %v; files %v", bySignal, all)
	}
	newest := bySignal["SIGTERM"]
	if resumed != filepath.Join("ckpt", newest) {
		t.Fatalf("attempt 2 resumed from %q; attempt 1's save on SIGTERM is %q (saves %v)", resumed, newest, all)
	}
	if m := nameRE.FindStringSubmatch(newest); m == nil || m[1] != fmt.Sprint(step) {
		t.Errorf("resumed at Adam's step %d from %s", step, newest)
	}
}
