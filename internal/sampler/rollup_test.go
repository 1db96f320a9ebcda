package sampler

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/testbin"
)

// readCost is a JobWatch's real clock and measure of its rollups: every
// read costs cost, and is counted.
type readCost struct {
	t     time.Time
	cost  time.Duration
	reads int
}

func (c *readCost) now() time.Time { return c.t }

func (c *readCost) measure(f func()) time.Duration {
	f()
	c.reads++
	return c.cost
}

// TestRollupBudget: PSS costs a page-table walk per read, so a JobWatch
// reads smaps_rollup within RollupBudget of the wall time; between reads a
// process's PSS is its last read plus its RSS change, and a change in the
// job's processes has every one read again at once.
func TestRollupBudget(t *testing.T) {
	files := fixture("max\n", "max\n")
	root := testbin.WriteTree(t, files)
	c := &clock{t: time.Unix(1700000000, 0)}
	s, _ := newTreeSampler(t, c, gpuScenario)
	w := s.WatchJob(JobSpec{Root: 100, Main: 101, Proc: procfs.FS{Root: root}})
	const cost = 10 * time.Millisecond
	rc := &readCost{t: time.Unix(1700000000, 0), cost: cost}
	w.rollups.now, w.rollups.measure = rc.now, rc.measure
	write := func(name, content string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// read takes a reading 100 ms after the last and returns PSS by PID and
	// how many rollups it read; readAt is each process's PSSReadAt, sampleT
	// the reading's time
	readAt := map[int]int64{}
	var sampleT time.Time
	read := func() (map[int]uint64, int) {
		t.Helper()
		rc.t = rc.t.Add(100 * time.Millisecond)
		c.t = c.t.Add(100 * time.Millisecond)
		before := rc.reads
		x, procs, _ := readJob(t, w)
		pss := map[int]uint64{}
		var sum uint64
		for _, p := range procs {
			if p.PSS == nil {
				t.Fatalf("process %d has no PSS", p.PID)
			}
			pss[p.PID] = *p.PSS
			sum += *p.PSS
			readAt[p.PID] = p.PSSReadAt
		}
		sampleT = x.T
		if x.PSS == nil || *x.PSS != sum {
			t.Fatalf("tree PSS %v, its processes' sum %d", x.PSS, sum)
		}
		return pss, rc.reads - before
	}

	// the first reading reads both processes
	pss, n := read()
	if n != 2 || pss[101] != 3000*kib || pss[102] != 1000*kib || readAt[101] != 0 || readAt[102] != 0 {
		t.Fatalf("first reading: %d rollups read, PSS %v, read at %v (want 0: now)", n, pss, readAt)
	}
	first := sampleT
	// 101 gains 500 pages; its rollup would now say otherwise, but the 20 ms
	// just spent are over the budget of this reading: both are estimated
	write("proc/101/stat", stat(101, 100, "python3", "R", 50, 1500))
	write("proc/101/smaps_rollup", rollup(9000, 7000))
	pss, n = read()
	if want := 3000*kib + 500*uint64(procfs.PageSize); n != 0 || pss[101] != want || pss[102] != 1000*kib {
		t.Fatalf("second reading: %d rollups read, PSS %v, want none read and 101 at %d", n, pss, want)
	}
	// an estimate says which reading its rollup was read for
	if readAt[101] != first.UnixMilli() || readAt[102] != first.UnixMilli() || !sampleT.After(first) {
		t.Errorf("second reading at %v: PSS read at %v, want the first reading's %d", sampleT, readAt, first.UnixMilli())
	}

	// over 60 readings the reads stay within the budget and reach both
	// processes, the longest unread first
	elapsed, reads := time.Duration(0), 0
	for range 60 {
		start := rc.t
		_, n := read()
		reads += n
		elapsed += rc.t.Sub(start)
	}
	spent := time.Duration(reads) * cost
	if budget := time.Duration(RollupBudget*float64(elapsed)) + cost; spent > budget {
		t.Errorf("%d reads (%v) over %v, more than the budget %v", reads, spent, elapsed, budget)
	}
	if reads < 20 {
		t.Errorf("only %d reads in %v: the budget allows about %d", reads, elapsed, int(RollupBudget*float64(elapsed)/float64(cost)))
	}
	pss, _ = read()
	if pss[101] != 7000*kib {
		t.Errorf("101's PSS %d after 60 readings: its new rollup was never read", pss[101])
	}

	// a fork: every process is read at the next reading, over budget or not
	write("proc/104/stat", stat(104, 101, "pt_data_worker", "S", 1, 300))
	write("proc/104/smaps_rollup", rollup(1200, 400))
	write("proc/102/smaps_rollup", rollup(3000, 600))
	pss, n = read()
	if n != 3 || pss[101] != 7000*kib || pss[102] != 600*kib || pss[104] != 400*kib {
		t.Errorf("after a fork: %d rollups read, PSS %v; want all three read", n, pss)
	}
}

// TestThreadCPU: a read's cost is its thread's CPU time, not its wall
// time: waiting costs (almost) nothing, and work costs some time, never
// more than the wall time it took (however busy the machine, a thread
// runs at most all of it; the kernel may account up to a tick of what
// ran before the first reading to the second).
func TestThreadCPU(t *testing.T) {
	if d := threadCPU(func() { time.Sleep(50 * time.Millisecond) }); d > 10*time.Millisecond {
		t.Errorf("a 50 ms sleep cost %v of CPU", d)
	}
	spin := func() {
		for t0 := time.Now(); time.Since(t0) < 30*time.Millisecond; {
		}
	}
	t0 := time.Now()
	d := threadCPU(spin)
	wall := time.Since(t0)
	if d <= 0 || d > wall+10*time.Millisecond {
		t.Errorf("30 ms of spinning cost %v of CPU in %v of wall time", d, wall)
	}
}
