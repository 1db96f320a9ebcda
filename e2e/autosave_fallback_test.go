package e2e

import (
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
