package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// trainAutosave is a training script with vramguard.autosave() and no
// signal handler of its own: Adam (whose state counts its steps) and a
// scheduler, a step every 20 ms, each step's number printed.
const trainAutosave = `
import sys, time, torch, vramguard
torch.manual_seed(0)
m = torch.nn.Linear(4, 1)
opt = torch.optim.Adam(m.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, 1000)
vramguard.autosave(model=m, opt=opt, sched=sched, dir=sys.argv[1], every="1h")
step = 0
while True:
    m(torch.randn(2, 4)).sum().backward()
    opt.step(); opt.zero_grad(); sched.step()
    step += 1
    print("step", step, flush=True)
    time.sleep(0.02)
`

// ptStepRE is the optimizer step in an autosave's file name.
var ptStepRE = regexp.MustCompile(`-(\d+)\.pt$`)

// TestScriptAutosaveOnWarning: a script with vramguard.autosave() under
// `vramguard run`, warned and ended as a scheduler does (SIGUSR1 to the
// supervisor; SIGTERM once the job saved and stepped on; SIGKILL after a
// grace). The save on the warning is a file written after it, at an
// optimizer-step boundary: torch loads it, and Adam's own step count in it
// is the step in its name and in the ckpt event; the post-mortem says at
// which step and how long after the warning. The SIGTERM's default is
// raised again after its own save: the job ends of SIGTERM, before the
// SIGKILL.
func TestScriptAutosaveOnWarning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, []byte(trainAutosave), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "ckpt")
	cmd, so, se := e.start("run", "--probe-hz", "10", "--", python, script, ck)
	stepRE := regexp.MustCompile(`step (\d+)\n`)
	lastStep := func() int {
		m := stepRE.FindAllStringSubmatch(so.String(), -1)
		if len(m) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(m[len(m)-1][1])
		return n
	}
	waitFor(t, 90*time.Second, "20 steps", func() bool { return lastStep() >= 20 })
	warned := time.Now()
	before := lastStep()
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	// The warning's save is a file past the step the warning came after
	// (renamed into place whole), and the job trains on past it: SIGUSR1's
	// default (the end of the job) was not taken. Waited for by what the
	// job does, not by a clock: a save's fsync on a busy disk takes seconds.
	savedAfter := func() int {
		names, _ := filepath.Glob(filepath.Join(ck, "*.pt"))
		best := 0
		for _, n := range names {
			if m := ptStepRE.FindStringSubmatch(n); m != nil {
				if k, _ := strconv.Atoi(m[1]); k > before && k > best {
					best = k
				}
			}
		}
		return best
	}
	waitFor(t, 90*time.Second, "the warning's save, and a step after it", func() bool {
		if !alive(cmd.Process.Pid) {
			t.Fatalf("the job ended after the warning (step %d): SIGUSR1's default was taken\n%s", lastStep(), se.String())
		}
		k := savedAfter()
		return k > 0 && lastStep() > k
	})
	terminated := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("the job outlived SIGTERM's grace:\n%s", se.String())
	}

	pm := e.explain("last")
	probe, _ := pm["probe"].(map[string]any)
	cks, _ := probe["checkpoints"].([]any)
	type save struct {
		path   string
		steps  int
		signal string
		warned time.Time
		t      time.Time
	}
	var onWarning []save
	for _, c := range cks {
		c := c.(map[string]any)
		w, _ := c["warned_at"].(string)
		if w == "" {
			continue
		}
		wt, err := time.Parse(time.RFC3339Nano, w)
		if err != nil {
			t.Fatal(err)
		}
		ct, _ := time.Parse(time.RFC3339Nano, c["t"].(string))
		onWarning = append(onWarning, save{c["path"].(string), int(c["optimizer_steps"].(float64)), fmt.Sprint(c["signal"]), wt, ct})
	}
	if len(onWarning) != 2 {
		t.Fatalf("saves on a warning %+v, want one on SIGUSR1 and one on SIGTERM; checkpoints %v\n%s", onWarning, cks, se.String())
	}
	for i, want := range []struct {
		sig string
		at  time.Time
	}{{"SIGUSR1", warned}, {"SIGTERM", terminated}} {
		s := onWarning[i]
		if s.signal != want.sig {
			t.Errorf("save %d on %s, want %s", i, s.signal, want.sig)
		}
		if d := s.warned.Sub(want.at); d < -time.Second || d > 2*time.Second {
			t.Errorf("%s recorded at %v, sent at %v", s.signal, s.warned, want.at)
		}
		fi, err := os.Stat(s.path)
		if err != nil {
			t.Fatalf("the save on %s: %v", s.signal, err)
		}
		// a file's mtime is the kernel's coarse clock (a tick, up to 10 ms,
		// behind time.Now()): a save on the signal read 0.4 ms before it
		if fi.ModTime().Before(want.at.Add(-20 * time.Millisecond)) {
			t.Errorf("%s written at %v, before the %s at %v", s.path, fi.ModTime(), s.signal, want.at)
		}
		// torch reads it, and the optimizer's own count is the step the
		// save was made at: the boundary right after a step.
		out, err := exec.Command(python, "-c", `
import sys, torch
d = torch.load(sys.argv[1])  # the test's own file (1.13's weights_only reads no floats)
o = d["objects"]
print(int(o["opt"]["state"][0]["step"]), int(o["sched"]["last_epoch"]), sorted(o["model"]))
`, s.path).CombinedOutput()
		if err != nil {
			t.Fatalf("torch.load %s: %v\n%s", s.path, err, out)
		}
		var adam, epoch int
		var rest string
		fmt.Sscanf(string(out), "%d %d %s", &adam, &epoch, &rest)
		if adam != s.steps || !strings.HasSuffix(s.path, fmt.Sprintf("-%d.pt", adam)) {
			t.Errorf("%s: Adam's step %d, the event's %d", s.path, adam, s.steps)
		}
		// the hook runs inside opt.step(): the scheduler's step of that
		// iteration is the one after
		if epoch != adam-1 {
			t.Errorf("%s: the scheduler's last_epoch %d at Adam's step %d", s.path, epoch, adam)
		}
		if adam <= before || adam > lastStep()+1 { // the last step's line may not be printed before the end
			t.Errorf("%s saved at step %d: the warning came after step %d, the job's last step was %d", s.signal, adam, before, lastStep())
		}
		line := fmt.Sprintf("%s was saved at step %d, ", s.path, adam)
		ev := strings.Join(strs(pm["evidence"]), "\n")
		if !strings.Contains(ev, line) || !strings.Contains(ev, "after the warning ("+s.signal+")") {
			t.Errorf("evidence lacks %q:\n%s", line, ev)
		}
		if !strings.Contains(se.String(), fmt.Sprintf("saved at step %d, ", adam)) {
			t.Errorf("the post-mortem on the terminal lacks the save at step %d:\n%s", adam, se.String())
		}
	}
	if onWarning[1].steps <= onWarning[0].steps {
		t.Errorf("the SIGTERM save at step %d is not after the SIGUSR1 one at %d", onWarning[1].steps, onWarning[0].steps)
	}
	if pm["exit_code"] != float64(143) || pm["signal"] != "SIGTERM" || pm["kernel"] != nil {
		b, _ := json.Marshal(pm)
		t.Errorf("the job did not end of SIGTERM: %s", b)
	}
}

// TestRunSaveOn: --save-on reaches the job as VRAMGUARD_SAVE_ON, by its
// canonical name; a signal the job cannot be warned with is a one-line
// usage error.
func TestRunSaveOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "SIGUSR1"},
		{[]string{"--save-on", "hup"}, "SIGHUP"},
		{[]string{"--save-on", "SIGTERM"}, "SIGTERM"},
	} {
		args := append(append([]string{"run", "--no-probe"}, c.args...), "--", "sh", "-c", `echo "save-on=[$VRAMGUARD_SAVE_ON]"`)
		r := e.run(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "save-on=["+c.want+"]") {
			t.Errorf("%v: exit %d stdout %q stderr %q", c.args, r.code, r.stdout, r.stderr)
		}
	}
	for _, bad := range []string{"SIGKILL", "SIGUSR2", "often"} {
		r := e.run("run", "--save-on", bad, "--", "true")
		if r.code != 2 || !strings.HasPrefix(r.stderr, "vramguard: ") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "--save-on "+bad) {
			t.Errorf("--save-on %s: exit %d stderr %q", bad, r.code, r.stderr)
		}
	}
}
