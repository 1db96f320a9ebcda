package sampler

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/timeline"
)

// counting wraps a backend and counts driver calls.
type counting struct {
	gpu.Backend
	devs, procs atomic.Int64
}

func (c *counting) Devices(ctx context.Context) ([]gpu.Device, error) {
	c.devs.Add(1)
	return c.Backend.Devices(ctx)
}

func (c *counting) Processes(ctx context.Context) ([]gpu.Process, error) {
	c.procs.Add(1)
	return c.Backend.Processes(ctx)
}

const scenario = `{
  "name": "t", "devices": [{"name": "G", "total": "10GiB"}],
  "processes": [
    {"pid": 700001, "device": 0, "memory": [["0s","1GiB"],["10s","2GiB"]],
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3","train.py"], "rss": "1GiB"}},
    {"pid": 700002, "host": {"ppid": 700001, "pgid": 700001, "comm": "pt_data_worker", "rss": "200MiB"}},
    {"pid": 0, "device": 0, "memory": "1MiB", "raw": true}
  ]
}`

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newSim(t testing.TB, c *clock) *sim.Backend {
	sc, err := sim.Parse([]byte(scenario), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return sim.New(sc, sim.WithClock(c.now))
}

func TestIntervalsAreBounded(t *testing.T) {
	tests := []struct {
		proc, dev         time.Duration
		wantProc, wantDev time.Duration
	}{
		{0, 0, time.Second, time.Second},
		{100 * time.Millisecond, 0, time.Second, time.Second},
		{2 * time.Second, 250 * time.Millisecond, 2 * time.Second, 250 * time.Millisecond},
		{2 * time.Second, 5 * time.Second, 2 * time.Second, 2 * time.Second},
		{time.Second, time.Millisecond, time.Second, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		s, err := New(Config{Backend: gpu.None{}, ProcessInterval: tt.proc, DeviceInterval: tt.dev})
		if err != nil {
			t.Fatal(err)
		}
		p, d := s.Intervals()
		if p != tt.wantProc || d != tt.wantDev {
			t.Errorf("New(%v, %v): intervals %v, %v; want %v, %v", tt.proc, tt.dev, p, d, tt.wantProc, tt.wantDev)
		}
	}
}

func TestRefreshAttributesAndKeepsHistory(t *testing.T) {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := newSim(t, c)
	s, _ := New(Config{Backend: b, Attributor: &attrib.Attributor{Src: b.Host(procfs.FS{})}, Now: c.now, History: 5 * time.Second})
	ctx := context.Background()
	var last Reading
	for i := 0; i < 8; i++ {
		smp, err := s.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = smp
		c.add(time.Second)
	}
	if len(last.Attrib.Jobs) != 1 {
		t.Fatalf("jobs: %+v", last.Attrib.Jobs)
	}
	j := last.Attrib.Jobs[0]
	if len(j.Processes) != 2 || j.Processes[1].Role != "worker" || !j.Processes[0].Simulated {
		t.Errorf("job processes %+v: want the trainer and its simulated worker", j.Processes)
	}
	if last.Dropped.BadPID != 1 {
		t.Errorf("dropped %+v, want the PID-0 record", last.Dropped)
	}
	h := s.History(j.Key)
	// 8 points over 7 s with a 5 s window keeps the last 6.
	if len(h) != 6 || h[len(h)-1].GPU != int64(j.GPUBytes) {
		t.Errorf("history has %d points (last %+v); want 6 ending at %d", len(h), h[len(h)-1], j.GPUBytes)
	}
	// the job's own monitor saw every sample, though history keeps 6
	if jd := last.Judged[j.Key]; jd == nil || !jd.Own || jd.Summary.Samples != 8 || len(j.Flags) != 0 {
		t.Errorf("judgement %+v flags %v, want the job's own monitor over 8 samples, no flags yet", jd, j.Flags)
	}
	if last.Seq != 8 {
		t.Errorf("seq %d, want 8", last.Seq)
	}
}

// Many readers share one sampler: the driver is asked once per period, not
// once per reader.
func TestReadersShareOnePoller(t *testing.T) {
	old := minProcess
	minProcess = 20 * time.Millisecond
	defer func() { minProcess = old }()
	c := &clock{t: time.Now()}
	cb := &counting{Backend: newSim(t, c)}
	s, _ := New(Config{Backend: cb, ProcessInterval: 20 * time.Millisecond, DeviceInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx, func(err error) { t.Error(err) }) }()

	const readers, samples = 6, 5
	var wg sync.WaitGroup
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seq uint64
			for i := 0; i < samples; i++ {
				smp, err := s.Next(ctx, seq)
				if err != nil {
					t.Error(err)
					return
				}
				if len(smp.Devices) != 1 {
					t.Errorf("sample without devices: %+v", smp)
				}
				seq = smp.Seq
			}
		}()
	}
	wg.Wait()
	stop()
	<-done
	smp, _ := s.Latest()
	if got := cb.procs.Load(); got > int64(smp.Seq) {
		t.Errorf("%d process queries for %d samples and %d readers: readers are polling the driver", got, smp.Seq, readers)
	}
	if cb.procs.Load() < samples {
		t.Errorf("only %d process queries", cb.procs.Load())
	}
}

func TestNextHonoursContext(t *testing.T) {
	s, _ := New(Config{Backend: gpu.None{}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(ctx, 0); err != context.Canceled {
		t.Fatalf("Next on a cancelled context: %v", err)
	}
}

// runs is a RunSource with fixed runs.
type runs []timeline.RunState

func (r runs) Running(context.Context) []timeline.RunState { return r }

// A job whose GPU memory keeps growing is flagged a leak by its own
// monitor, and an OOM risk as the device fills; a supervised run is a job
// even with no GPU memory and carries its own monitor's verdict, which the
// sampler never judges again.
func TestJudge(t *testing.T) {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	sc, err := sim.Parse([]byte(`{
  "name": "leak", "devices": [{"name": "G", "total": "80GiB"}],
  "processes": [
    {"pid": 710001, "device": 0, "memory": [["0s","8GiB"],["20m","70GiB"]],
     "host": {"ppid": 1, "comm": "python3", "cmdline": ["python3","leaky.py"], "rss": "1GiB"}}
  ]
}`), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	b := sim.New(sc, sim.WithClock(c.now))
	leak, _ := json.Marshal(monitor.Finding{Verdict: "leak", Series: "rss", LeakStartS: 12, DetectedS: 300})
	run := timeline.RunState{ID: "r1", Name: "cpu-job", JobPID: 4000000, Attempt: 1,
		Latest:   &timeline.Sample{RSS: 3 << 30},
		Findings: []timeline.Event{{Kind: timeline.KindLeak, Data: leak}}}
	s, _ := New(Config{Backend: b, Attributor: &attrib.Attributor{Src: b.Host(procfs.FS{})}, Now: c.now, Runs: runs{run}})
	ctx := context.Background()
	var last Reading
	leakAt := -1
	for i := 0; i < 900; i++ {
		smp, err := s.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = smp
		for _, jd := range smp.Judged {
			for _, e := range jd.Events {
				if e.Kind == timeline.KindLeak && leakAt < 0 {
					leakAt = i
				}
			}
		}
		c.add(time.Second)
	}
	var sim, cpu *attrib.Job
	for i := range last.Attrib.Jobs {
		switch j := &last.Attrib.Jobs[i]; j.Key {
		case "run:r1":
			cpu = j
		default:
			sim = j
		}
	}
	if cpu == nil || cpu.RSSBytes != 3<<30 || cpu.Kind != attrib.KindRun || len(cpu.Flags) != 1 || cpu.Flags[0] != "leak" {
		t.Fatalf("supervised CPU run as a job: %+v", cpu)
	}
	if jd := last.Judged["run:r1"]; jd.Own || jd.Summary.Leak == nil || jd.Summary.Leak.DetectedS != 300 {
		t.Errorf("run judgement %+v: want the run's own finding", jd)
	}
	if sim == nil || leakAt < 0 || !slices.Contains(sim.Flags, "leak") {
		t.Fatalf("leaking GPU job: flags %v, leak event at sample %d", sim, leakAt)
	}
	if jd := last.Judged[sim.Key]; !jd.Own || jd.Summary.Leak == nil || jd.Summary.Leak.Series != "used" {
		t.Errorf("GPU job judgement %+v", jd.Summary.Leak)
	}
}

// probes is a ProbeSource with fixed figures per PID.
type probes map[int][2]uint64

func (p probes) ProbeMemory(pid int) (uint64, uint64, bool) {
	v, ok := p[pid]
	return v[0], v[1], ok
}

// The probe's figures of a job's processes are summed onto the job; a job
// no probe reports for keeps none.
func TestProbeFiguresPerJob(t *testing.T) {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := newSim(t, c)
	s, _ := New(Config{Backend: b, Attributor: &attrib.Attributor{Src: b.Host(procfs.FS{})}, Now: c.now,
		Probes: probes{700001: {300, 500}, 700002: {20, 40}, 123: {1, 1}}})
	smp, err := s.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(smp.Attrib.Jobs) != 1 {
		t.Fatalf("jobs %+v", smp.Attrib.Jobs)
	}
	j := smp.Attrib.Jobs[0]
	if j.AllocatedBytes == nil || *j.AllocatedBytes != 320 || *j.ReservedBytes != 540 {
		t.Errorf("job figures %v/%v, want the trainer's and its worker's summed: 320/540", j.AllocatedBytes, j.ReservedBytes)
	}
	if h := s.History(j.Key); len(h) != 1 || h[0].Alloc != 320 || h[0].Reserved != 540 {
		t.Errorf("history %+v", h)
	}
	s2, _ := New(Config{Backend: b, Attributor: &attrib.Attributor{Src: b.Host(procfs.FS{})}, Now: c.now, Probes: probes{}})
	smp, _ = s2.Refresh(context.Background())
	if j := smp.Attrib.Jobs[0]; j.AllocatedBytes != nil {
		t.Errorf("figures %v without a probe report", *j.AllocatedBytes)
	}
}
