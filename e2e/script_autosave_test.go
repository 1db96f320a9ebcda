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

// trainBlocks is a training script with vramguard.autosave() and no
// handler of its own that stops stepping once the file "block" appears, as
// a job blocked in data loading or a collective does: it notes "blocked at
// step N" and sleeps. With the argument "slow" its first step after the
// file appears takes 4 s more (noted "slow step starts" before and "slow
// step ends" after the update), and then it blocks. train.log gets
// "T ready PID", "T step N", ...
const trainBlocks = `import os, sys, time, torch, vramguard
mode, d = sys.argv[1], sys.argv[2]
log = os.open("train.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def note(what):
    os.write(log, ("%.3f %s\n" % (time.time(), what)).encode())
torch.manual_seed(0)
m = torch.nn.Linear(8, 1)
class Slow(torch.optim.Adam):
    slow = 0.0
    def step(self, closure=None):
        if not self.slow:
            return super().step(closure)
        note("slow step starts")
        time.sleep(self.slow)
        r = super().step(closure)
        note("slow step ends")
        return r
opt = Slow(m.parameters(), lr=0.01)
vramguard.autosave(model=m, opt=opt, dir=d, every="1h")
done = 0
note("ready %d" % os.getpid())
while True:
    if os.path.exists("block"):
        if mode == "slow" and not opt.slow:
            opt.slow = 4.0
        else:
            note("blocked at step %d" % done)
            while True:
                time.sleep(3600)  # a DataLoader that never returns
    m(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    done += 1
    note("step %d" % done)
    time.sleep(0.05)
`

// TestAutosaveFallback: a script with vramguard.autosave() under `vramguard
// run`, warned (SIGUSR1 to the supervisor) and SIGKILLed 8 s later, as a
// scheduler whose job does not end on its warning does.
//
// blocked: the job stopped stepping before the warning came (blocked in
// its data loading). No step boundary comes, so the fallback saves from
// its thread 2 s after the warning: the file is there before the SIGKILL,
// torch loads it, Adam's step count in it is the last step the job
// completed, and the post-mortem says it was the fallback's, at that step,
// as long after the warning as the test measured.
//
// slow: a step is in progress when the fallback's 2 s are up (it takes 4 s
// more). The save waits for it: it holds the step's update (Adam's count is
// that step's) and is written after the step's sleep, not at 2 s.
func TestAutosaveFallback(t *testing.T) {
	for _, mode := range []string{"blocked", "slow"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			work := t.TempDir()
			if err := os.WriteFile(filepath.Join(work, "train.py"), []byte(trainBlocks), 0o644); err != nil {
				t.Fatal(err)
			}
			ck := filepath.Join(work, "ckpt")
			cmd := exec.Command(bin, "run", "--probe-hz", "10", "--", python, "train.py", mode, ck)
			cmd.Dir, cmd.Env = work, e.environ()
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			t.Cleanup(func() { cmd.Process.Kill(); <-done })
			log := func() string { b, _ := os.ReadFile(filepath.Join(work, "train.log")); return string(b) }
			at := func(what string) (time.Time, bool) {
				for _, l := range strings.Split(log(), "\n") {
					if ts, rest, ok := strings.Cut(l, " "); ok && strings.HasPrefix(rest, what) {
						f, _ := strconv.ParseFloat(ts, 64)
						return time.Unix(0, int64(f*1e9)), true
					}
				}
				return time.Time{}, false
			}
			waitFor(t, 90*time.Second, "10 steps", func() bool { _, ok := at("step 10"); return ok })
			if err := os.WriteFile(filepath.Join(work, "block"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			waitOn := map[string]string{"blocked": "blocked at step ", "slow": "slow step starts"}[mode]
			waitFor(t, 30*time.Second, waitOn, func() bool { _, ok := at(waitOn); return ok })
			warned := time.Now()
			if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			// the scheduler's grace, then its SIGKILL of the job
			time.Sleep(time.Until(warned.Add(8 * time.Second)))
			m := regexp.MustCompile(`ready (\d+)`).FindStringSubmatch(log())
			if m == nil {
				t.Fatalf("no pid in the log:\n%s", log())
			}
			pid, _ := strconv.Atoi(m[1])
			killed := time.Now()
			syscall.Kill(pid, syscall.SIGKILL)
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("vramguard did not end after its job was killed:\n%s", out.String())
			}
			bm := regexp.MustCompile(`blocked at step (\d+)`).FindStringSubmatch(log())
			if bm == nil {
				t.Fatalf("the job never blocked:\n%s", log())
			}
			last, _ := strconv.Atoi(bm[1])

			pm := e.explain("last")
			probe, _ := pm["probe"].(map[string]any)
			cks, _ := probe["checkpoints"].([]any)
			var c map[string]any
			for _, x := range cks {
				if x := x.(map[string]any); x["warned_at"] != nil {
					if c != nil {
						t.Fatalf("two saves on the warning: %v", cks)
					}
					c = x
				}
			}
			if c == nil {
				t.Fatalf("nothing was saved on the warning before the SIGKILL; checkpoints %v\n%s\n%s", cks, log(), out.String())
			}
			path := c["path"].(string)
			steps := int(c["optimizer_steps"].(float64))
			ct, _ := time.Parse(time.RFC3339Nano, c["t"].(string))
			wt, _ := time.Parse(time.RFC3339Nano, c["warned_at"].(string))
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatalf("the save on the warning: %v", err)
			}
			// torch reads it; Adam's own count is the last completed step
			b, err := exec.Command(python, "-c", `
import sys, torch
d = torch.load(sys.argv[1])
print(int(d["objects"]["opt"]["state"][0]["step"]))
`, path).CombinedOutput()
			if err != nil {
				t.Fatalf("torch.load %s: %v\n%s", path, err, b)
			}
			adam, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if adam != last || steps != last || !strings.HasSuffix(path, fmt.Sprintf("-%d.pt", last)) {
				t.Errorf("%s: Adam's step %d, the event's %d; the job's last completed step was %d", path, adam, steps, last)
			}
			// the figure the post-mortem gives, against the test's clock
			after := ct.Sub(wt)
			if d := fi.ModTime().Sub(warned) - after; d < -time.Second || d > time.Second {
				t.Errorf("post-mortem: saved %v after the warning; the file was written %v after the test sent it", after, fi.ModTime().Sub(warned))
			}
			ev := strings.Join(strs(pm["evidence"]), "\n")
			switch mode {
			case "blocked":
				if c["fallback"] != true || c["fallback_s"] != 2.0 {
					t.Errorf("the save is not marked as the fallback's: %v", c)
				}
				// not before its 2 s; and before the kill (the grace is
				// what it is for), however long a loaded machine's save takes
				if after < 2*time.Second || !fi.ModTime().Before(killed) {
					t.Errorf("the fallback saved %v after the warning, the file written at %v, the kill at %v: want 2 s after the warning and before the kill", after, fi.ModTime(), killed)
				}
				line := fmt.Sprintf("%s was saved by the fallback at step %d, ", path, last)
				if !strings.Contains(ev, line) || !strings.Contains(ev, "before the job ended: no optimizer step came within 2s of the warning") {
					t.Errorf("evidence lacks %q:\n%s", line, ev)
				}
				// how long before the kill, against the test's own SIGKILL
				bm := regexp.MustCompile(`after the warning \(SIGUSR1\) and ([0-9.]+(?:ms|s)) before the job ended`).FindStringSubmatch(ev)
				if bm == nil {
					t.Fatalf("the evidence says not how long before the end the save came:\n%s", ev)
				}
				before, err := time.ParseDuration(bm[1])
				if d := killed.Sub(fi.ModTime()) - before; err != nil || d < -time.Second || d > time.Second {
					t.Errorf("saved %s before the job ended, says the evidence; the test killed it %v after the file was written", bm[1], killed.Sub(fi.ModTime()))
				}
				if !strings.Contains(out.String(), fmt.Sprintf("saved by the fallback at step %d, ", last)) {
					t.Errorf("the run's post-mortem lacks the fallback's save:\n%s", out.String())
				}
			case "slow":
				start, _ := at("slow step starts")
				end, _ := at("slow step ends")
				// a file's mtime is the kernel's coarse clock (a tick, up to
				// 10 ms, behind time.time()); a save that did not wait would
				// come some 2 s before the step's end
				if fi.ModTime().Before(start.Add(4*time.Second - 20*time.Millisecond)) {
					t.Errorf("saved %v after the slow step started, before its 4-s step could end", fi.ModTime().Sub(start))
				}
				if end.IsZero() || fi.ModTime().After(end.Add(3*time.Second)) {
					t.Errorf("the slow step ended at %v, the save at %v", end, fi.ModTime())
				}
			}
		})
	}
}
