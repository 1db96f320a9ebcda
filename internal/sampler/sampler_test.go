package sampler

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
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
	var flagged []int
	s, _ := New(Config{
		Backend: b, Attributor: &attrib.Attributor{Src: b.Host(procfs.FS{})}, Now: c.now, History: 5 * time.Second,
		FlagJobs: func(j *attrib.Job, h []Point, now time.Time) []string {
			flagged = append(flagged, len(h))
			if len(h) >= 2 && h[len(h)-1].GPUBytes > h[0].GPUBytes {
				return []string{"growing"}
			}
			return nil
		},
	})
	ctx := context.Background()
	var last Sample
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
	if len(h) != 6 || h[len(h)-1].GPUBytes != j.GPUBytes {
		t.Errorf("history has %d points (last %+v); want 6 ending at %d", len(h), h[len(h)-1], j.GPUBytes)
	}
	if want := []int{1, 2, 3, 4, 5, 6, 6, 6}; len(flagged) != len(want) || flagged[7] != 6 {
		t.Errorf("flag hook saw history lengths %v, want %v", flagged, want)
	}
	if len(j.Flags) != 1 || j.Flags[0] != "growing" {
		t.Errorf("flags %v, want [growing] from the hook", j.Flags)
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
