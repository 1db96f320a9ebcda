package postmortem

import (
	"bytes"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
	"github.com/vramguard/vramguard/internal/timeline"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func TestKernelLines(t *testing.T) {
	g := int64(3<<30 + 100<<20)
	neg := int64(-5 << 20)
	tests := []struct {
		name              string
		k                 *Kernel
		running, autosave string
	}{
		{"no kernel section", nil, "", ""},
		{"between cells, no autosave", &Kernel{CellsTotal: 3}, "", ""},
		{"running, grown", &Kernel{Running: &Cell{CellData: timeline.CellData{ExecutionCount: 12}, HostGrowth: &g}},
			"In[12] was running (+3.1 GiB since it started)", ""},
		{"running, shrunk", &Kernel{Running: &Cell{CellData: timeline.CellData{ExecutionCount: 2}, HostGrowth: &neg}},
			"In[2] was running (-5 MiB since it started)", ""},
		{"running, no sample in it", &Kernel{Running: &Cell{CellData: timeline.CellData{ExecutionCount: 4}}}, "In[4] was running", ""},
		{"autosave", &Kernel{Autosave: &Autosave{Path: "/w/a.pt", Objects: []string{"model", "opt"}, AgeS: 252}}, "",
			"the newest autosave (model, opt) was 4m12s old: /w/a.pt"},
		{"autosave of no named objects", &Kernel{Autosave: &Autosave{Path: "/w/a.pt", AgeS: 5}}, "", "the newest autosave was 5s old: /w/a.pt"},
	}
	for _, tt := range tests {
		if got := tt.k.RunningLine(); got != tt.running {
			t.Errorf("%s: RunningLine %q, want %q", tt.name, got, tt.running)
		}
		if got := tt.k.AutosaveLine(); got != tt.autosave {
			t.Errorf("%s: AutosaveLine %q, want %q", tt.name, got, tt.autosave)
		}
	}
}

// TestRenderKernelCells renders explain's cell list of a kernel attempt
// against testdata/kernel-cells.golden (go test -update rewrites it).
func TestRenderKernelCells(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	end := func(s float64) *time.Time { e := t0.Add(time.Duration(s * float64(time.Second))); return &e }
	g1, g3 := int64(198<<20), int64(701<<20)
	k := &Kernel{CellsTotal: 60, Cells: []Cell{
		{CellData: timeline.CellData{ExecutionCount: 57, FirstLine: "import torch", Start: t0, End: end(9.1), Seconds: 9.1, RSSDelta: 201 << 20}, HostGrowth: &g1},
		{CellData: timeline.CellData{ExecutionCount: 58, FirstLine: "1/0", Start: t0, End: end(9.2), Seconds: 0.001, Error: "ZeroDivisionError"}},
		{CellData: timeline.CellData{ExecutionCount: 59, FirstLine: "y = model(x)", Start: t0, End: end(12), Seconds: 2.5, RSSDelta: 1 << 20,
			CUDA: []timeline.CellDevice{{Device: 0, AllocatedDelta: 1288490189, AllocatedPeakDelta: 3650722202}}}},
		{CellData: timeline.CellData{ExecutionCount: 60, FirstLine: "cache = [features * i for i in range(1000)]  # a first line longer than the column shows", Start: t0}, HostGrowth: &g3},
	}, Autosave: &Autosave{Path: "/w/ckpt/autosave-20260102-115500-56.pt", Objects: []string{"model", "opt"}, AgeS: 312}}
	var b bytes.Buffer
	renderKernel(&b, k, 2)
	testbin.Golden(t, filepath.Join("testdata", "kernel-cells.golden"), b.Bytes(), *update)
}
