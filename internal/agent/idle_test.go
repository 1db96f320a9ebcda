package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

// idleJobs: ana's job works for 10 s and then holds 20 GiB at 0% until
// 300 s, when it works again; ben's works all along; a job whose
// utilisation the driver does not report is never idle.
const idleJobs = `{
  "name": "idle", "duration": "1h",
  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}],
  "processes": [
    {"pid": 963001, "device": 0, "memory": "20GiB", "sm_util": [["0s", 60], ["10s", 60], ["10.001s", 0], ["299.999s", 0], ["300s", 50]],
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "explore.py"], "uid": 1201, "user": "ana"}},
    {"pid": 963002, "device": 0, "memory": "10GiB", "sm_util": 40,
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"], "uid": 1202, "user": "ben"}},
    {"pid": 963003, "device": 0, "memory": "1GiB",
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "quiet.py"], "uid": 1202, "user": "ben"}}
  ]}`

// TestIdleHolders: a job holding GPU memory under the threshold counts
// idle seconds from the moment its utilisation fell (the scenario's 10 s,
// on the injected clock), is flagged from the window on, its owner is told
// once (an idle alert naming the user, a notice), and it starts again at
// zero when it works.
func TestIdleHolders(t *testing.T) {
	r := newRig(t, idleJobs, Config{Idle: IdlePolicy{Window: 30 * time.Second, NotifyAfter: time.Minute}})
	start := r.clk.Now()
	byName := func() map[string]JobView {
		out := map[string]JobView{}
		for _, j := range r.ag.Snapshot().Jobs {
			out[j.Name] = j
		}
		return out
	}
	metric := regexp.MustCompile(`(?m)^vramguard_job_idle_seconds\{[^}]*job_name="python3 explore.py"[^}]*user="ana"[^}]*\} (\S+)$`)
	idleEvents := 0
	for step := 0; step < 320; step++ {
		now := r.clk.Now()
		r.step(1)
		el := now.Sub(start).Seconds() // the scenario's time of this sample
		jobs := byName()
		ana, ben, quiet := jobs["python3 explore.py"], jobs["python3 train.py"], jobs["python3 quiet.py"]
		// independent measure: seconds since the scenario's drop at 10 s
		want := 0.0
		if el > 10 && el < 300 {
			want = math.Floor(el) - 11 // first unused sample is at 11 s
		}
		if math.Abs(ana.IdleS-want) > 1e-6 {
			t.Fatalf("at %v s: ana's job idle %v s, want %v", el, ana.IdleS, want)
		}
		if ana.Idle != (want >= 30) {
			t.Fatalf("at %v s: ana's job idle flag %v after %v s unused (window 30 s)", el, ana.Idle, want)
		}
		if ben.IdleS != 0 || ben.Idle || quiet.IdleS != 0 || quiet.Idle {
			t.Fatalf("at %v s: a working job or one without utilisation counted idle: %v %v", el, ben.IdleS, quiet.IdleS)
		}
		if step == 100 {
			_, m := r.do("GET", "/metrics", "", "")
			g := metric.FindStringSubmatch(m)
			if g == nil || g[1] != fmt.Sprint(want) {
				t.Fatalf("vramguard_job_idle_seconds for ana's job: %v, want %v", g, want)
			}
			var mach Machine
			_, body := r.do("GET", "/api/v1/machine", "", "")
			if err := json.Unmarshal([]byte(body), &mach); err != nil {
				t.Fatal(err)
			}
			for _, j := range mach.Jobs {
				if idle := strings.Contains(strings.Join(j.Flags, ","), FlagIdle); idle != (j.Name == "python3 explore.py") {
					t.Errorf("job %s: flags %v", j.Name, j.Flags)
				}
			}
		}
	}
	for _, a := range r.ag.Alerts().Recent() {
		if a.Kind != EventIdle {
			continue
		}
		idleEvents++
		if a.User != "ana" || a.Job != "python3 explore.py" || !strings.Contains(a.Message, "20 GiB on GPU 0 unused for 1m0s") {
			t.Errorf("idle alert %+v", a)
		}
		// told when it had been idle a minute: at 71 s
		if got := a.Time.Sub(start); got != 71*time.Second {
			t.Errorf("idle alert at %v, want 71s", got)
		}
	}
	if idleEvents != 1 {
		t.Fatalf("%d idle alerts, want one for ana's stretch", idleEvents)
	}
	var n struct{ Notices []Notice }
	_, body := r.do("GET", "/api/v1/notices", "", "")
	if err := json.Unmarshal([]byte(body), &n); err != nil || len(n.Notices) != 1 || n.Notices[0].UID != 1201 || n.Notices[0].User != "ana" ||
		!strings.HasPrefix(n.Notices[0].Text, "vramguard: python3 explore.py (pid 963001) has held 20 GiB on GPU 0 unused for 1m0s; end it") {
		t.Fatalf("notices %s (%v)", body, err)
	}
	_, body = r.do("GET", fmt.Sprintf("/api/v1/notices?after=%d", n.Notices[0].ID), "", "")
	if !strings.Contains(body, `"notices":[]`) {
		t.Errorf("notices after the newest: %s", body)
	}
}

// idleKernel: a notebook kernel and a plain script, both holding memory at
// 0% from the start.
const idleKernel = `{
  "name": "idle-kernel", "duration": "1h",
  "devices": [{"name": "Test GPU", "uuid": "GPU-test-0", "total": "80GiB"}],
  "processes": [
    {"pid": 964001, "device": 0, "memory": "12GiB", "sm_util": 0,
     "host": {"ppid": 1, "comm": "python3", "uid": 1301, "user": "cleo",
              "cmdline": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/home/cleo/.local/share/jupyter/runtime/kernel-9a8b7c6d-0000-4000-8000-000000000001.json"]}},
    {"pid": 964002, "device": 0, "memory": "3GiB", "sm_util": 0,
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3", "hold.py"], "uid": 1301, "user": "cleo"}}
  ]}`

// TestReclaimIdleKernel: with ReclaimAfter, only the notebook kernel is
// shut down (through Config.Reclaim), once, after its owner has a notice
// saying so; the plain script holding memory just as idly is left alone.
func TestReclaimIdleKernel(t *testing.T) {
	asked := make(chan string, 4)
	var r *rig
	noticeFirst := make(chan bool, 4)
	r = newRig(t, idleKernel, Config{
		Idle: IdlePolicy{Window: 10 * time.Second, ReclaimAfter: 20 * time.Second},
		Reclaim: func(ctx context.Context, kernel string) error {
			_, body := r.do("GET", "/api/v1/notices", "", "")
			noticeFirst <- strings.Contains(body, "shutting down kernel 9a8b7c6d")
			asked <- kernel
			return nil
		},
	})
	start := r.clk.Now()
	r.step(60)
	select {
	case k := <-asked:
		if k != "9a8b7c6d-0000-4000-8000-000000000001" {
			t.Fatalf("reclaimed %q", k)
		}
		if !<-noticeFirst {
			t.Error("the kernel was shut down before its owner's notice")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle kernel was not reclaimed")
	}
	select {
	case k := <-asked:
		t.Fatalf("a second reclaim: %q", k)
	case <-time.After(200 * time.Millisecond):
	}
	var reclaims []Alert
	for _, a := range r.ag.Alerts().Recent() {
		if a.Kind == EventReclaim {
			reclaims = append(reclaims, a)
		}
	}
	if len(reclaims) != 1 || reclaims[0].User != "cleo" || reclaims[0].Time.Sub(start) != 20*time.Second ||
		!strings.Contains(reclaims[0].Message, "has held 12 GiB on GPU 0 unused for 20s (serve --reclaim-idle 20s)") {
		t.Fatalf("reclaim alerts %+v", reclaims)
	}
}
