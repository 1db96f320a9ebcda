package sampler

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
	"github.com/vramguard/vramguard/internal/ranks"
)

// benchScenario starts n real processes (sleep) and returns a scenario
// spreading them over devs simulated GPUs, so a sample does real /proc and
// cgroup reads for every GPU process. bench/gpu/run.sh compares the result
// with psutil doing the same reads.
func benchScenario(b *testing.B, devs, n int) *sim.Scenario {
	b.Helper()
	type dev struct {
		Name  string `json:"name"`
		Total string `json:"total"`
	}
	type proc struct {
		PID    int    `json:"pid"`
		Device int    `json:"device"`
		Memory string `json:"memory"`
		SM     int    `json:"sm_util"`
	}
	sc := struct {
		Name      string `json:"name"`
		Devices   []dev  `json:"devices"`
		Processes []proc `json:"processes"`
	}{Name: "bench"}
	for i := 0; i < devs; i++ {
		sc.Devices = append(sc.Devices, dev{"NVIDIA H100 80GB HBM3", "80GiB"})
	}
	for i := 0; i < n; i++ {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		sc.Processes = append(sc.Processes, proc{cmd.Process.Pid, i % devs, "300MiB", 5})
	}
	data, _ := json.Marshal(sc)
	s, err := sim.Parse(data, os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// cpuTime is this process's user and system CPU time.
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkFullSample is one full sample: 8 devices and 200 GPU processes
// from sim, a scan of the live /proc (every process's stat), and status,
// cmdline and cgroup for every job's processes. gpu+proc+cgroups is the
// sampler's steady state, where those three are kept per (pid, start time)
// from the previous sample, the stat files stay open and only the stat of
// processes that may have moved or that a job uses is read; cold is every
// sample as the first one: a new Attributor, nothing kept.
func BenchmarkFullSample(b *testing.B) {
	sc := benchScenario(b, 8, 200)
	for _, bc := range []struct {
		name   string
		attrib bool
		cold   bool
	}{{"gpu+proc+cgroups", true, false}, {"cold", true, true}, {"gpu-only", false, false}} {
		b.Run(bc.name, func(b *testing.B) {
			be := sim.New(sc)
			cfg := Config{Backend: be}
			if bc.attrib {
				// as top and serve run it: attribution and each job
				// process's rank, from its environment
				cfg.Attributor = &attrib.Attributor{Src: procfs.FS{}}
				cfg.Environ = procfs.FS{}.Environ
			}
			s, _ := New(cfg)
			ctx := context.Background()
			smp, err := s.Refresh(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if bc.attrib && len(smp.Attrib.Jobs) != 200 {
				b.Fatalf("%d jobs, want 200", len(smp.Attrib.Jobs))
			}
			b.ReportAllocs()
			var usr, sys time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if bc.cold {
					// As the first sample: nothing kept by attrib,
					// no stat file kept open by procfs.
					b.StopTimer()
					s.cfg.Attributor.Close()
					s.cfg.Attributor = &attrib.Attributor{Src: procfs.FS{}}
					s.places = ranks.Cache{}
					b.StartTimer()
				}
				u0, s0 := cpuTime()
				if _, err := s.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				u1, s1 := cpuTime()
				usr, sys = usr+u1-u0, sys+s1-s0
			}
			b.StopTimer()
			// CPU time (user+system, all threads) per sample: on a shared
			// machine it moves less with load than the wall-clock ns/op.
			b.ReportMetric(float64(usr+sys)/float64(b.N)/1e6, "cpu-ms/op")
			b.ReportMetric(float64(sys)/float64(b.N)/1e6, "sys-ms/op")
			b.ReportMetric(float64(smp.Attrib.Scanned), "procs-scanned")
		})
	}
}
