package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// graceTrain is train.py as a careful user writes it: it trains (a step
// every half second), and on SIGTERM it saves its checkpoint, which takes
// 4 s (or as many as its argument says), then exits 143; a SIGUSR1 (the
// scheduler's warning) is noted and training goes on. signals.log gets
// "T got NAME", "T saved", "T ready PID".
const graceTrain = `import os, signal, sys, time
SAVE = float(sys.argv[1]) if len(sys.argv) > 1 else 4
# os.write, not a buffered file: a signal may come twice at once (from Slurm
# and forwarded by vramguard), and a handler re-entering a buffered write
# raises RuntimeError
log = os.open("signals.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def note(what):
    os.write(log, ("%.3f %s\n" % (time.time(), what)).encode())
step = 0
saving = False
def on_term(sig, frame):
    global saving
    note("got " + signal.Signals(sig).name)
    if saving:
        return
    saving = True
    time.sleep(SAVE)
    with open("ckpt.tmp", "w") as f:
        f.write("step %d\n" % step)
    os.replace("ckpt.tmp", "ckpt.txt")
    note("saved")
    sys.exit(143)
def on_warning(sig, frame):
    note("got " + signal.Signals(sig).name)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGUSR1, on_warning)
note("ready %d" % os.getpid())
while True:
    step += 1
    print("step", step, flush=True)
    time.sleep(0.5)
`

// graceJob is one batch job of graceTrain under `srun vramguard run`, on
// its own Slurm cluster, with its own state directory.
type graceJob struct {
	t    *testing.T
	c    *testbin.SlurmCluster
	e    *env
	work string
	id   string
}

// submitGrace starts a cluster (KillWait 30 s, Slurm's default: the job's 4-s save fits under load,
// and Slurm's SIGKILL comes before any default of vramguard's would) and
// submits a batch script of sbatch lines, then body, which starts the
// training with $VRAMGUARD.
func submitGrace(t *testing.T, sbatch, body string) *graceJob {
	t.Helper()
	g := newGraceJob(t, 30, graceTrain)
	g.id = g.c.Sbatch(g.work, "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --output=slurm-%j.out\n"+sbatch+body)
	return g
}

// newGraceJob starts a one-node Slurm cluster whose KillWait is killWait
// seconds, writes train (a Python script) as train.py in a new work
// directory, and gives the cluster's commands the environment a batch
// script starts vramguard with: VRAMGUARD_HOME (a new state directory),
// VRAMGUARD (the binary) and PYTHON. Should t fail, it logs signals.log
// and the job's output. The caller submits the job (g.id).
func newGraceJob(t *testing.T, killWait int, train string) *graceJob {
	t.Helper()
	c := testbin.StartSlurm(t, fmt.Sprintf("KillWait=%d", killWait))
	g := &graceJob{t: t, c: c, e: newEnv(t), work: t.TempDir()}
	if err := os.WriteFile(filepath.Join(g.work, "train.py"), []byte(train), 0o644); err != nil {
		t.Fatal(err)
	}
	// the job runs with the submitter's environment (sbatch --export=ALL)
	c.Env = append(c.Env, "VRAMGUARD_HOME="+g.e.home, "VRAMGUARD="+testbin.Path(t), "PYTHON="+python)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("signals.log:\n%s\njob output:\n%s", g.signals(), g.output())
		}
	})
	return g
}

// signals is what the job wrote to signals.log.
func (g *graceJob) signals() string {
	b, _ := os.ReadFile(filepath.Join(g.work, "signals.log"))
	return string(b)
}

// output is the batch job's output file (srun's and vramguard's lines).
func (g *graceJob) output() string {
	b, _ := os.ReadFile(filepath.Join(g.work, "slurm-"+g.id+".out"))
	return string(b)
}

// at is when signals.log noted what (its first such line).
func (g *graceJob) at(what string) (float64, bool) {
	for _, l := range strings.Split(g.signals(), "\n") {
		t, rest, ok := strings.Cut(l, " ")
		if ok && strings.HasPrefix(rest, what) {
			f, err := strconv.ParseFloat(t, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// ready waits for the training to run under vramguard.
func (g *graceJob) ready() {
	g.t.Helper()
	g.c.WaitRunning(g.id, 60*time.Second)
	waitFor(g.t, 60*time.Second, "the training to start", func() bool { _, ok := g.at("ready"); return ok })
}

// run is the one run vramguard recorded, as `runs --json` shows it.
func (g *graceJob) run() map[string]any {
	g.t.Helper()
	var runs []map[string]any
	if err := json.Unmarshal([]byte(g.e.run("runs", "--json").stdout), &runs); err != nil || len(runs) != 1 {
		g.t.Fatalf("runs --json: %v, %d runs; want one", err, len(runs))
	}
	return runs[0]
}

// requeue requeues the job (scontrol requeue) and waits for its training's
// second start. Slurm holds a requeued job until the first start's job
// credential has expired (the test cluster's cred_expire, 10 s) and then
// starts it again itself: moving its start (scontrol update StartTime=now)
// would race the revocation of that credential, and the job would be
// killed as "non-startable".
func (g *graceJob) requeue() {
	g.t.Helper()
	g.c.Scontrol("requeue", g.id)
	waitFor(g.t, 60*time.Second, "the requeued job to wait", func() bool {
		job := g.c.Job(g.id)
		return job != nil && job["JobState"] == "PENDING"
	})
	waitFor(g.t, 90*time.Second, "the requeued job's training to start", func() bool {
		return strings.Count(g.signals(), " ready ") == 2
	})
}

// endRequeued checks that the requeued job's run goes on in its second
// attempt, cancels the job and returns the run's post-mortem and its two
// attempts' detail.
func (g *graceJob) endRequeued() (map[string]any, []any) {
	g.t.Helper()
	r := g.run()
	if r["status"] != "running" || r["attempts"] != float64(2) {
		g.t.Errorf("after the requeue the run is %v with %v attempts; want running, 2", r["status"], r["attempts"])
	}
	g.c.Scancel(g.id)
	g.c.WaitJob(g.id, 60*time.Second)
	pm := g.e.explain("last")
	detail, _ := pm["attempts_detail"].([]any)
	if pm["attempts"] != float64(2) || len(detail) != 2 {
		g.t.Fatalf("post-mortem: %v attempts, detail %v; want 2", pm["attempts"], detail)
	}
	return pm, detail
}

// keepsRunning checks that a warning changed nothing: after it the
// training goes on in its first attempt, under the same Slurm job.
func (g *graceJob) keepsRunning() {
	g.t.Helper()
	before := strings.Count(g.output(), "step ")
	time.Sleep(2 * time.Second)
	if after := strings.Count(g.output(), "step "); after <= before {
		g.t.Errorf("training stopped after the warning (%d steps, then %d)", before, after)
	}
	if job := g.c.Job(g.id); job["JobState"] != "RUNNING" {
		g.t.Errorf("the Slurm job is %s after the warning, want RUNNING", job["JobState"])
	}
	if r := g.run(); r["status"] != "running" || r["attempts"] != float64(1) {
		g.t.Errorf("after the warning the run is %v with %v attempts; want running, 1 (no restart)", r["status"], r["attempts"])
	}
	if n := strings.Count(g.signals(), " ready "); n != 1 {
		g.t.Errorf("the training started %d times, want once", n)
	}
	if strings.Contains(g.signals(), "saved") {
		g.t.Error("the warning ended the training")
	}
}

// savedInGrace checks what vramguard guarantees when the scheduler ends
// the job: the SIGTERM handler ran its 4-s save to the end (vramguard
// killed nothing before Slurm's KillWait), the run ended in its one
// attempt with the job's own exit status, and vramguard exited with it.
// It returns the post-mortem.
func (g *graceJob) savedInGrace() map[string]any {
	g.t.Helper()
	// Slurm shows a cancelled job CANCELLED at once, while its processes
	// still run their handlers (COMPLETING): the run's end is vramguard's
	// own, once the job ended
	waitFor(g.t, 90*time.Second, "the run to end", func() bool {
		var runs []map[string]any
		return json.Unmarshal([]byte(g.e.run("runs", "--json").stdout), &runs) == nil && len(runs) == 1 && runs[0]["status"] != "running"
	})
	term, ok := g.at("got SIGTERM")
	if !ok {
		g.t.Fatal("the job never got SIGTERM")
	}
	saved, ok := g.at("saved")
	if !ok {
		g.t.Fatal("the job's SIGTERM handler did not finish its save: it was killed first")
	}
	if saved-term < 4 {
		g.t.Errorf("saved %.1fs after SIGTERM, want the handler's 4 s", saved-term)
	}
	if b, err := os.ReadFile(filepath.Join(g.work, "ckpt.txt")); err != nil || !strings.HasPrefix(string(b), "step ") {
		g.t.Errorf("checkpoint: %q, %v", b, err)
	}
	pm := g.e.explain("last")
	if pm["exit_code"] != float64(143) || pm["attempts"] != float64(1) {
		g.t.Errorf("post-mortem: exit code %v, %v attempts; want 143 (the job's), 1", pm["exit_code"], pm["attempts"])
	}
	// srun reports its task's exit: vramguard's own, the job's status
	if out := g.output(); !strings.Contains(out, "task 0: Exited with exit code 143") {
		g.t.Errorf("srun did not report vramguard exiting 143:\n%s", out)
	}
	return pm
}

// endsInGrace waits (up to d) for the Slurm job to end in state (TIMEOUT,
// CANCELLED), then checks that it saved in the grace (savedInGrace) and
// that its attempt ended for the scheduler's reason (schedulerReason).
func (g *graceJob) endsInGrace(state, reason string, d time.Duration) {
	g.t.Helper()
	if job := g.c.WaitJob(g.id, d); job["JobState"] != state {
		g.t.Errorf("the Slurm job ended %s, want %s", job["JobState"], state)
	}
	schedulerReason(g.t, g.savedInGrace(), reason)
}

// schedulerReason asserts the reason the scheduler's end is diagnosed as
// (time_limit, cancelled): the supervisor reads Slurm's "*** STEP N ON NODE
// CANCELLED AT ... DUE TO TIME LIMIT ***" line from the job's output file
// (slurmstepd writes it to the step's stderr, not the task's) and names the
// step daemon that signalled it.
func schedulerReason(t *testing.T, pm map[string]any, want string) {
	t.Helper()
	if pm["reason"] != want {
		t.Errorf("the attempt ended %v, want %s (the scheduler's end); evidence %v", pm["reason"], want, pm["evidence"])
	}
}

// srunTrain is the step of every job here, as users write it.
const srunTrain = `srun "$VRAMGUARD" run -- "$PYTHON" train.py
`

// TestSlurmTimeLimitKeepsTheGrace: a job ended at its time limit
// (--time=1; Slurm sends SIGTERM, more than once, then SIGKILL KillWait
// later) saves its checkpoint in the grace Slurm gives.
func TestSlurmTimeLimitKeepsTheGrace(t *testing.T) {
	t.Parallel()
	g := submitGrace(t, "#SBATCH --time=1\n", srunTrain)
	g.ready()
	g.endsInGrace("TIMEOUT", "time_limit", 150*time.Second)
}

// TestSlurmScancel: scancel ends the job with its save finished; before
// that, scancel --signal=USR1 (what --signal=USR1@90 sends) reaches the
// job's handler and changes nothing else.
func TestSlurmScancel(t *testing.T) {
	t.Parallel()
	for _, warn := range []bool{false, true} {
		t.Run(fmt.Sprintf("warned first %v", warn), func(t *testing.T) {
			t.Parallel()
			g := submitGrace(t, "", srunTrain)
			g.ready()
			if warn {
				g.c.Scancel("--signal=USR1", g.id)
				waitFor(t, 30*time.Second, "the job's handler to hear SIGUSR1", func() bool { _, ok := g.at("got SIGUSR1"); return ok })
				g.keepsRunning()
			}
			g.c.Scancel(g.id)
			g.endsInGrace("CANCELLED", "cancelled", 60*time.Second)
		})
	}
}

// TestSlurmBatchWarning: #SBATCH --signal=B:USR1@N warns the batch script
// alone, which forwards it to the step as CLUSTER.md shows; the training
// hears it and runs on to its time limit, where it saves in the grace.
func TestSlurmBatchWarning(t *testing.T) {
	t.Parallel()
	g := submitGrace(t, "#SBATCH --time=1\n#SBATCH --signal=B:USR1@55\n", `trap 'kill -USR1 "$step"' USR1
srun "$VRAMGUARD" run -- "$PYTHON" train.py &
step=$!
wait "$step"; wait "$step"
`)
	g.ready()
	waitFor(t, 120*time.Second, "the job's handler to hear the forwarded SIGUSR1", func() bool { _, ok := g.at("got SIGUSR1"); return ok })
	g.keepsRunning()
	g.endsInGrace("TIMEOUT", "time_limit", 150*time.Second)
}

// TestSlurmRequeueIsTheNextAttempt: a job Slurm requeues (scontrol
// requeue) starts again under the same job id; its task is the same run
// as before, in attempt 2, and the first attempt saved in its grace.
func TestSlurmRequeueIsTheNextAttempt(t *testing.T) {
	t.Parallel()
	g := submitGrace(t, "#SBATCH --requeue\n", srunTrain)
	g.ready()
	g.requeue()
	if saved, ok := g.at("saved"); !ok {
		t.Error("the first start's SIGTERM handler did not finish its save")
	} else if idx := strings.Index(g.signals(), "saved"); idx > strings.LastIndex(g.signals(), " ready ") {
		t.Errorf("saved at %.1f, after the second start", saved)
	}
	_, detail := g.endRequeued()
	first, _ := detail[0].(map[string]any)
	if first["exit_code"] != float64(143) {
		t.Errorf("attempt 1: %v", first)
	}
	schedulerReason(t, first, "cancelled") // Slurm: "CANCELLED AT … DUE TO JOB REQUEUE"
	if !strings.Contains(g.output(), "this is attempt 2 of run") {
		t.Errorf("the requeued start did not say it continues the run:\n%s", g.output())
	}
}

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
