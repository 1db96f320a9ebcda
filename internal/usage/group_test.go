package usage

import (
	"math"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

// TestComputeGroup: two ranks on node a whose peaks come at different
// times (rank 0's GPU and host memory high in the first half, rank 1's in
// the second) and one on node b. A node's peak is the most its ranks held
// together at one sample, not the sum of their peaks; each rank's GPU peak
// is against its GPUs' total, the node's host peak against the request.
func TestComputeGroup(t *testing.T) {
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	series := func(first, second int64, util int64) []Series {
		return samples(from, time.Second, 60, func(i int) timeline.Point {
			v := first
			if i >= 30 {
				v = second
			}
			return timeline.Point{GPU: v << 30, RSS: v << 20, Util: util}
		})
	}
	jobs := []GroupJob{
		{Job: Job{Key: "run:b", Series: series(5, 5, 50)}, Node: "b", Ranks: []int{2}, GPUTotal: 40 << 30, MemRequest: 100 << 20},
		{Job: Job{Key: "run:1", Series: series(2, 10, 0)}, Node: "a", Ranks: []int{1}, GPUTotal: 80 << 30, MemRequest: 64 << 20},
		{Job: Job{Key: "run:0", Series: series(10, 2, 50)}, Node: "a", Ranks: []int{0}, GPUTotal: 80 << 30, MemRequest: 64 << 20},
	}
	rep := ComputeGroup("7", jobs, 1, from, from.Add(time.Minute))
	if len(rep.Nodes) != 2 || rep.Nodes[0].Node != "a" || len(rep.Ranks) != 3 || rep.Ranks[0].Ranks[0] != 0 || rep.Ranks[2].Node != "b" {
		t.Fatalf("nodes %+v ranks %+v", rep.Nodes, rep.Ranks)
	}
	a := rep.Nodes[0]
	if a.GPUPeakBytes != 12<<30 || a.HostPeakBytes != 12<<20 || a.HostRequestBytes != 64<<20 || a.HostPeakFraction != 12.0/64 {
		t.Errorf("node a %+v, want 12 GiB and 12 MiB at its peak (not the 20 of the peaks' sum), 64 MiB asked", a)
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	r0, r1 := rep.Ranks[0], rep.Ranks[1]
	if r0.GPUPeakBytes != 10<<30 || r0.GPUPeakFraction != 0.125 || r0.HostPeakBytes != 10<<20 || !near(r0.BusyHours, 60.0/3600) || r0.IdleHours != 0 {
		t.Errorf("rank 0 %+v", r0)
	}
	if r1.GPUPeakBytes != 10<<30 || !near(r1.IdleHours, 60.0/3600) || r1.BusyHours != 0 {
		t.Errorf("rank 1 %+v", r1)
	}
	if !near(a.IdleHours, 60.0/3600) || !near(a.BusyHours, 60.0/3600) || !near(a.HeldHours, 120.0/3600) {
		t.Errorf("node a's hours %+v", a)
	}
	m := MergeGroup([]GroupReport{ComputeGroup("7", jobs[:1], 1, from, from), ComputeGroup("7", jobs[1:], 1, from, from)})
	if len(m.Nodes) != 2 || m.Nodes[0].Node != "a" || len(m.Ranks) != 3 || m.Ranks[2].Node != "b" {
		t.Errorf("merged %+v", m)
	}
}
