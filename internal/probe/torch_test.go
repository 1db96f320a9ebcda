package probe

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A real CPU training loop under the probe: optimizer steps, RSS samples,
// checkpoint events; forked DataLoader workers report as their own pids and
// CUDA stays uninitialised everywhere.
func TestTorchCPUTraining(t *testing.T) {
	t.Parallel()
	l := listen(t)
	runDir := t.TempDir()
	env := Env(baseEnv("TRAIN_STEPS=24"), probeDir(t), Options{Socket: l.Path(), Hz: 20, RunDir: runDir, RunID: "r-cpu"})
	r := runPython(t, env, nil, testdata(t, "scripts/train_cpu.py"), runDir)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	if len(r.stderr) != 0 {
		t.Errorf("stderr not empty:\n%s", r.stderr)
	}
	var rep trainReport
	r.lastJSON(t, &rep)
	if rep.CUDAInitialized || rep.WorkerCUDA {
		t.Errorf("torch.cuda.is_initialized() became True (main %v, workers %v) in a CPU job", rep.CUDAInitialized, rep.WorkerCUDA)
	}
	if len(rep.WorkerPIDs) != 2 {
		t.Fatalf("want 2 DataLoader workers, saw %v", rep.WorkerPIDs)
	}
	msgs := collect(t, l, append([]int{rep.PID}, rep.WorkerPIDs...)...)

	hello := byType(msgs, rep.PID, TypeHello)
	if len(hello) != 1 || hello[0].RunID != "r-cpu" || hello[0].Forked || hello[0].PeerPID != rep.PID {
		dumpMessages(t, msgs)
		t.Fatalf("main hello: %+v", hello)
	}
	for _, w := range rep.WorkerPIDs {
		h := byType(msgs, w, TypeHello)
		if len(h) != 1 || !h[0].Forked || h[0].PPID != rep.PID {
			t.Errorf("worker %d hello: %+v", w, h)
		}
		if len(byType(msgs, w, TypeSample)) == 0 {
			t.Errorf("worker %d sent no sample", w)
		}
		for _, s := range byType(msgs, w, TypeSample) {
			if s.OptimizerSteps != 0 {
				t.Errorf("worker %d counts %d optimizer steps; a forked child starts at 0", w, s.OptimizerSteps)
			}
		}
	}
	if tm := byType(msgs, rep.PID, TypeTorch); len(tm) != 1 || tm[0].StepHook == "" || tm[0].Version == "" {
		t.Errorf("torch message: %+v", tm)
	}
	if len(byType(msgs, rep.PID, TypeBye)) != 1 {
		t.Errorf("main process sent no bye")
	}
	if e := byType(msgs, 0, TypeError); len(e) > 0 {
		t.Errorf("probe reported internal errors: %+v", e)
	}

	samples := byType(msgs, rep.PID, TypeSample)
	last := samples[len(samples)-1]
	if last.OptimizerSteps != rep.Steps || rep.Steps != 24 {
		t.Errorf("last sample counts %d optimizer steps; the loop made %d", last.OptimizerSteps, rep.Steps)
	}
	var maxRSS int64
	for _, s := range samples {
		if s.RSSBytes <= 0 {
			t.Errorf("sample without rss_bytes: %+v", s)
		}
		maxRSS = max(maxRSS, s.RSSBytes)
		if len(s.CUDA) != 0 {
			t.Errorf("CPU job sample has CUDA stats: %+v", s.CUDA)
		}
	}

	// The first sample comes before `import torch`; later ones carry torch.
	if maxRSS < 50<<20 || maxRSS > 8<<30 {
		t.Errorf("largest rss_bytes %d is not a torch process's RSS", maxRSS)
	}

	type ck struct {
		path  string
		bytes int64
	}
	var got []ck
	for _, c := range byType(msgs, rep.PID, TypeCkpt) {
		if c.OK == nil || !*c.OK || c.Bytes == nil || c.Seconds <= 0 || c.Atomic {
			t.Errorf("ckpt event: %+v", c)
			continue
		}
		got = append(got, ck{c.Path, *c.Bytes})
	}
	want := []ck{
		{filepath.Join(runDir, "half.pt"), rep.HalfBytes},
		{filepath.Join(runDir, "final.pt"), rep.FinalBytes},
		{"", rep.BufferBytes}, // a BytesIO: no path, bytes from tell()
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkpoints:\n got %v\nwant %v", got, want)
	}
	if half := byType(msgs, rep.PID, TypeCkpt)[0]; half.OptimizerSteps != 12 {
		t.Errorf("half.pt saved at step %d, want 12", half.OptimizerSteps)
	}

	var s Summary
	for _, m := range msgs {
		s.Add(m)
	}
	if s.OptimizerSteps != 24 || len(s.Checkpoints) != 3 || s.PeakAllocatedBytes != nil || s.PeakReservedBytes != nil ||
		s.Samples < 4 || len(s.PIDs) != 3 || s.PeakRSSBytes <= 0 {
		t.Errorf("summary: %+v", s)
	}
	// The workers exit through os._exit and cannot remove their empty
	// stack files; the helper does.
	if err := RemoveEmptyStackFiles(runDir); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(runDir, "stacks-*")); len(m) != 0 {
		t.Errorf("stack files left: %v", m)
	}
	if _, err := os.Stat(filepath.Join(runDir, "final.pt")); err != nil {
		t.Fatal(err)
	}
}
