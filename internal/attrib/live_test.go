package attrib

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/procfs"
)

// TestLiveKeptTable: on the live /proc, an Attributor that keeps the process
// table between passes (reading only the stat of what it uses) comes to the
// same result as a new one, also after a job's parent exits and its
// children are reparented.
func TestLiveKeptTable(t *testing.T) {
	// sh -> two sleeps; the sleeps hold "GPU memory".
	sh := exec.Command("sh", "-c", "sleep 60 & a=$!; sleep 60 & echo $a $!; wait")
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	var kids []int
	buf := make([]byte, 128)
	n, _ := out.Read(buf)
	for _, f := range strings.Fields(string(buf[:n])) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("sh said %q", buf[:n])
		}
		kids = append(kids, pid)
	}
	if len(kids) != 2 {
		t.Fatalf("sh said %q", buf[:n])
	}
	defer func() {
		for _, k := range kids {
			exec.Command("kill", strconv.Itoa(k)).Run()
		}
		sh.Process.Kill()
		sh.Wait()
	}()
	// Wait until both have become sleep (exec), so every reading sees them
	// as they stay.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ready := true
		for _, k := range kids {
			if p, err := (procfs.FS{}).Proc(k); err != nil || p.Comm != "sleep" || p.RSSBytes == 0 {
				ready = false
			}
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeps did not start")
		}
	}
	var gprocs []gpu.Process
	for i, k := range kids {
		gprocs = append(gprocs, gpu.Process{PID: k, DeviceIndex: i, UsedBytes: 1 << 30, SMUtilPercent: -1})
	}
	kept := &Attributor{Src: procfs.FS{}}
	defer kept.Close()
	same := func(when string) {
		t.Helper()
		// Two passes of the kept Attributor, then a new one; the table may
		// change in between (other processes come and go), so compare the
		// jobs of our processes only.
		kept.Attribute(gprocs)
		got, err := kept.Attribute(gprocs)
		if err != nil {
			t.Fatal(err)
		}
		fresh := &Attributor{Src: procfs.FS{}}
		defer fresh.Close()
		want, err := fresh.Attribute(gprocs)
		if err != nil {
			t.Fatal(err)
		}
		// RSS moves between the two readings (the sleeps are still
		// starting); everything else must agree.
		norss := func(jobs []Job) []byte {
			for i := range jobs {
				jobs[i].RSSBytes = 0
				ps := append([]Process(nil), jobs[i].Processes...)
				for k := range ps {
					if ps[k].RSSBytes == 0 {
						t.Errorf("%s: process %d has no RSS", when, ps[k].PID)
					}
					ps[k].RSSBytes = 0
				}
				jobs[i].Processes = ps
			}
			b, _ := json.Marshal(jobs)
			return b
		}
		g, w := norss(got.Jobs), norss(want.Jobs)
		if string(g) != string(w) {
			t.Errorf("%s: kept table\n%s\nnew Attributor\n%s", when, g, w)
		}
		if len(got.Jobs) != 2 {
			t.Errorf("%s: %d jobs, want 2", when, len(got.Jobs))
		}
	}
	same("under sh")
	// The sleeps' parent exits; they are reparented while the kept
	// Attributor has seen them under sh.
	sh.Process.Kill()
	sh.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := procfs.FS{}.Proc(kids[0])
		if err != nil {
			t.Fatal(err)
		}
		if p.PPID != sh.Process.Pid || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	same("after sh exited")
	res, _ := kept.Attribute(gprocs)
	for _, j := range res.Jobs {
		if j.Processes[0].PPID == sh.Process.Pid {
			t.Errorf("job %s still has the exited sh %d as parent", j.Key, sh.Process.Pid)
		}
	}
}
