package sampler

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/cgroup"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/testbin"
)

const kib, mib, gib = 1 << 10, 1 << 20, 1 << 30

// stat is a /proc/<pid>/stat line with the fields the reader uses.
func stat(pid, ppid int, comm, state string, cpu, rssPages uint64) string {
	return fmt.Sprintf("%d (%s) %s %d %d %d 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 9 0 %d 0", pid, comm, state, ppid, pid, pid, cpu, rssPages)
}

func rollup(rssKB, pssKB uint64) string {
	return fmt.Sprintf("55d2-7ffd ---p 00000000 00:00 0  [rollup]\nRss:  %d kB\nPss:  %d kB\nPss_Anon:  %d kB\nShared_Clean:  0 kB\n", rssKB, pssKB, pssKB)
}

// fixture is a job below shim 100: python 101 and its DataLoader worker 102
// (sharing pages: RSS sums to more than PSS), a worker 103 that is a
// zombie, and an unrelated process 200 that is on the GPU too.
func fixture(ownMax, sliceMax string) map[string]string {
	own := "sys/fs/cgroup/job.slice/vramguard-r-1/"
	return map[string]string{
		"proc/meminfo":                           "MemTotal:       16384000 kB\nMemAvailable:    8000000 kB\n",
		"proc/100/stat":                          stat(100, 1, "vramguard", "S", 1, 100),
		"proc/101/stat":                          stat(101, 100, "python3", "R", 50, 1000),
		"proc/101/smaps_rollup":                  rollup(4000, 3000),
		"proc/101/cgroup":                        "0::/job.slice/vramguard-r-1\n",
		"proc/102/stat":                          stat(102, 101, "pt_data_worker", "S", 7, 800),
		"proc/102/smaps_rollup":                  rollup(3000, 1000),
		"proc/103/stat":                          stat(103, 101, "pt_data_worker", "Z", 3, 0),
		"proc/200/stat":                          stat(200, 1, "other", "S", 9, 5000),
		"proc/200/smaps_rollup":                  rollup(20000, 20000),
		"sys/fs/cgroup/cgroup.controllers":       "memory\n",
		"sys/fs/cgroup/job.slice/memory.max":     sliceMax,
		"sys/fs/cgroup/job.slice/memory.current": "900000000\n",
		own + "memory.max":                       ownMax,
		own + "memory.current":                   "9000000\n",
		own + "memory.peak":                      "12000000\n",
		own + "memory.events":                    "oom 0\noom_kill 0\n",
	}
}

const gpuScenario = `{"name": "t", "devices": [{"name": "G", "total": "10GiB"}, {"name": "H", "total": "20GiB"}],
  "processes": [{"pid": 101, "device": 0, "memory": "1GiB"}, {"pid": 200, "device": 1, "memory": "3GiB"}]}`

func newTreeSampler(t *testing.T, c *clock, scenario string) (*Sampler, *counting) {
	t.Helper()
	sc, err := sim.Parse([]byte(scenario), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	b := &counting{Backend: sim.New(sc, sim.WithClock(c.now))}
	s, err := New(Config{Backend: b, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func TestTreeFixture(t *testing.T) {
	c := &clock{t: time.Unix(1700000000, 0)}
	tests := []struct {
		name, ownMax, sliceMax string
		wantLimit              uint64
		wantSource, wantDir    string
		wantLimitUsage         uint64
	}{
		{"own limit is the tightest", "100000000\n", "1000000000\n", 100000000, "--memory-limit", "job.slice/vramguard-r-1", 9000000},
		{"an ancestor's limit is tighter", "100000000\n", "50000000\n", 50000000, "cgroup", "job.slice", 900000000},
		{"no cgroup limit: the host's RAM", "max\n", "max\n", 16384000 * kib, "host", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := testbin.WriteTree(t, fixture(tt.ownMax, tt.sliceMax))
			s, _ := newTreeSampler(t, c, gpuScenario)
			own := filepath.Join(root, "sys/fs/cgroup/job.slice/vramguard-r-1")
			x, info, err := s.Tree(context.Background(), JobSpec{Root: 100, Main: 101, Cgroup: own, CgroupVersion: 2,
				Proc: procfs.FS{Root: root}, Cgroups: cgroup.Reader{Root: root}})
			if err != nil {
				t.Fatal(err)
			}
			// RSS comes from smaps_rollup (read at the same instant as PSS),
			// not stat's page counts; the zombie and the unrelated process
			// are not the job's.
			if x.NProcs != 2 || x.RSS != 7000*kib || x.PSS == nil || *x.PSS != 4000*kib || x.CPUTicks != 57 {
				t.Errorf("nprocs %d rss %d pss %v cpu %d", x.NProcs, x.RSS, x.PSS, x.CPUTicks)
			}
			if fmt.Sprint(info.PIDs) != "[101 102]" {
				t.Errorf("pids %v", info.PIDs)
			}
			if x.CgroupUsage == nil || *x.CgroupUsage != 9000000 || info.CgroupPeak != 12000000 {
				t.Errorf("own cgroup usage %v peak %d", x.CgroupUsage, info.CgroupPeak)
			}
			if (tt.ownMax == "max\n") != (x.CgroupLimit == nil) {
				t.Errorf("own cgroup limit %v", x.CgroupLimit)
			}
			wantDir := ""
			if tt.wantDir != "" {
				wantDir = filepath.Join(root, "sys/fs/cgroup", tt.wantDir)
			}
			if x.Limit != tt.wantLimit || x.LimitSource != tt.wantSource || info.LimitCgroup != wantDir || info.LimitUsage != tt.wantLimitUsage {
				t.Errorf("limit %d (%s) at %q charge %d; want %d (%s) at %q charge %d", x.Limit, x.LimitSource, info.LimitCgroup,
					info.LimitUsage, tt.wantLimit, tt.wantSource, wantDir, tt.wantLimitUsage)
			}
			// GPU: only the job's own process, and only its device's total
			if x.GPUUsed == nil || *x.GPUUsed != gib || x.GPUTotal == nil || *x.GPUTotal != 10*gib {
				t.Errorf("gpu used %v total %v", x.GPUUsed, x.GPUTotal)
			}
			var procs []ProcReading
			if err := json.Unmarshal(x.Procs, &procs); err != nil || len(procs) != 2 || procs[0].GPU != gib || procs[1].PSS == nil || *procs[1].PSS != 1000*kib {
				t.Errorf("procs %s (%v)", x.Procs, err)
			}
		})
	}
}

func TestTreeWithoutSmapsRollupFallsBackToRSS(t *testing.T) {
	files := fixture("max\n", "max\n")
	delete(files, "proc/102/smaps_rollup") // a kernel before 4.14, or no permission
	root := testbin.WriteTree(t, files)
	s, _ := newTreeSampler(t, &clock{t: time.Unix(1700000000, 0)}, gpuScenario)
	x, _, err := s.Tree(context.Background(), JobSpec{Root: 100, Proc: procfs.FS{Root: root}, Cgroups: cgroup.Reader{Root: root}})
	if err != nil {
		t.Fatal(err)
	}
	// 102 still counts, with stat's RSS; PSS is not given for a tree it
	// could not be read for in full
	if x.NProcs != 2 || x.RSS != 4000*kib+800*uint64(procfs.PageSize) || x.PSS != nil {
		t.Errorf("nprocs %d rss %d pss %v", x.NProcs, x.RSS, x.PSS)
	}
	if x.CgroupUsage != nil {
		t.Error("a job without a cgroup of its own must not report one")
	}
}

func TestTreeEmpty(t *testing.T) {
	root := testbin.WriteTree(t, fixture("max\n", "max\n"))
	s, _ := newTreeSampler(t, &clock{t: time.Unix(1700000000, 0)}, gpuScenario)
	if _, _, err := s.Tree(context.Background(), JobSpec{Root: 102, Proc: procfs.FS{Root: root}}); err != ErrNoProcesses {
		t.Errorf("err %v, want ErrNoProcesses", err)
	}
}

// TestTreeSharesTheProcessList: job readers use the Sampler's process list
// and ask the driver at most once per process interval, however often they
// read and however many there are.
func TestTreeSharesTheProcessList(t *testing.T) {
	c := &clock{t: time.Unix(1700000000, 0)}
	root := testbin.WriteTree(t, fixture("max\n", "max\n"))
	s, b := newTreeSampler(t, c, gpuScenario)
	spec := JobSpec{Root: 100, Proc: procfs.FS{Root: root}, Cgroups: cgroup.Reader{Root: root}}
	w1, w2 := s.WatchJob(spec), s.WatchJob(spec)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		for _, w := range []*JobWatch{w1, w2} {
			if _, _, err := w.Read(ctx); err != nil {
				t.Fatal(err)
			}
		}
		c.add(100 * time.Millisecond)
	}
	if n := b.procs.Load(); n != 1 {
		t.Errorf("%d process queries in 0.5s, want 1", n)
	}
	c.add(time.Second)
	w1.Read(ctx)
	w2.Read(ctx)
	if n := b.procs.Load(); n != 2 {
		t.Errorf("%d process queries after a second, want 2", n)
	}
	// a sample the Sampler took for others (serve's loop) is used as is
	if _, err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	w1.Read(ctx)
	if n := b.procs.Load(); n != 3 {
		t.Errorf("%d process queries, want 3 (Refresh's only)", n)
	}
}

// TestTreeLive reads a real tree: a shell with two children, compared with
// what /proc says about them.
func TestTreeLive(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	s, err := New(Config{Backend: gpu.None{}})
	if err != nil {
		t.Fatal(err)
	}
	w := s.WatchJob(JobSpec{Root: cmd.Process.Pid})
	var pids []int
	deadline := time.Now().Add(5 * time.Second)
	for len(pids) < 2 && time.Now().Before(deadline) {
		_, info, _ := w.Read(context.Background())
		pids = info.PIDs
		time.Sleep(20 * time.Millisecond)
	}
	x, info, err := w.Read(context.Background())
	if err != nil || x.NProcs != 2 || x.PSS == nil {
		t.Fatalf("nprocs %d pss %v err %v", x.NProcs, x.PSS, err)
	}
	var rss, pss uint64
	for _, pid := range info.PIDs {
		r, err := procfs.FS{}.SmapsRollup(pid)
		if err != nil {
			t.Fatal(err)
		}
		rss += r.RSS
		pss += r.PSS
	}
	// two idle sleeps do not change their memory; PSS moves a little only
	// if another process mapping the same libraries starts or ends
	if x.RSS != rss || !within(*x.PSS, pss, 0.05) {
		t.Errorf("tree rss %d pss %d; /proc says %d and %d", x.RSS, *x.PSS, rss, pss)
	}
	if *x.PSS >= x.RSS {
		t.Errorf("pss %d not below rss %d for two processes sharing libc", *x.PSS, x.RSS)
	}
	if x.Limit == 0 || x.LimitSource == "" {
		t.Errorf("no limit in force: %d %q", x.Limit, x.LimitSource)
	}
}

func within(a, b uint64, tol float64) bool {
	d := float64(a) - float64(b)
	return d <= tol*float64(b) && -d <= tol*float64(b)
}
