package sampler

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu/sim"
	"github.com/vramguard/vramguard/internal/procfs"
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

// BenchmarkFullSample is one full sample: 8 devices and 200 GPU processes
// from sim, a scan of the live /proc, and status, cmdline and cgroup reads
// for every job's processes.
func BenchmarkFullSample(b *testing.B) {
	sc := benchScenario(b, 8, 200)
	for _, bc := range []struct {
		name   string
		attrib bool
	}{{"gpu+proc+cgroups", true}, {"gpu-only", false}} {
		b.Run(bc.name, func(b *testing.B) {
			be := sim.New(sc)
			cfg := Config{Backend: be}
			if bc.attrib {
				cfg.Attributor = &attrib.Attributor{Src: procfs.FS{}}
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
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(smp.Attrib.Scanned), "procs-scanned")
		})
	}
}
