package usage

import (
	"math"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

// TestComputeByGPU: by GPU each GPU index is a row from the samples'
// per-GPU readings; a sample without them is split evenly over the job's
// Devices at the job's utilisation; a job that held nothing is under "-";
// the total sums the rows' figures and counts each job and death once.
// The samples are one a minute for an hour (a minute each), so each
// expected figure is worked out here from the readings.
func TestComputeByGPU(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	const h = 1.0 / 60 // a sample's hours
	series := func(n int, p func(i int) timeline.Point) []Series { return samples(t0, time.Minute, n, p) }
	dp := func(i int, gib, util int64) timeline.DevicePoint {
		return timeline.DevicePoint{Index: i, Bytes: gib << 30, Util: util}
	}
	jobs := []Job{
		// on GPUs 0 (8 GiB, 90%) and 1 (2 GiB, 0%) for 60 samples, 1 GiB
		// more on GPU 1 for the last 30; died
		{Key: "a", Name: "ddp", User: "ana", Devices: []int{0, 1}, Died: []string{"oom"}, Series: series(60, func(i int) timeline.Point {
			g1 := int64(2)
			if i >= 30 {
				g1 = 3
			}
			return timeline.Point{GPU: (8 + g1) << 30, Util: 90, GPUs: []timeline.DevicePoint{dp(0, 8, 90), dp(1, g1, 0)}}
		})},
		// an older agent's samples: 6 GiB at 50% over GPUs 1 and 2, 3 each
		{Key: "b", Name: "old", User: "ben", Devices: []int{1, 2}, Series: series(60, func(int) timeline.Point {
			return timeline.Point{GPU: 6 << 30, Util: 50}
		})},
		// no GPU memory at all
		{Key: "c", Name: "cpu", User: "ben", Series: series(10, func(int) timeline.Point { return timeline.Point{Util: -1} })},
	}
	rep := Compute(jobs, ByGPU, 1, t0, t0.Add(time.Hour))
	want := map[string]Row{
		"0": {Jobs: 1, MemoryGiBHours: 8 * 60 * h, HeldHours: 60 * h, BusyHours: 60 * h, PeakBytes: 8 << 30, Died: 1},
		"1": {Jobs: 2, MemoryGiBHours: (2*30 + 3*30 + 3*60) * h, HeldHours: 120 * h, BusyHours: 60 * h, IdleHours: 60 * h, PeakBytes: 3 << 30, Died: 1},
		"2": {Jobs: 1, MemoryGiBHours: 3 * 60 * h, HeldHours: 60 * h, BusyHours: 60 * h, PeakBytes: 3 << 30},
		"-": {Jobs: 1},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	same := func(got, w Row) bool {
		return got.Jobs == w.Jobs && near(got.MemoryGiBHours, w.MemoryGiBHours) && near(got.HeldHours, w.HeldHours) &&
			near(got.BusyHours, w.BusyHours) && near(got.IdleHours, w.IdleHours) && got.PeakBytes == w.PeakBytes && got.Died == w.Died
	}
	if len(rep.Rows) != len(want) {
		t.Fatalf("rows %+v, want %d", rep.Rows, len(want))
	}
	for i, r := range rep.Rows {
		if w := want[r.Group]; !same(r, w) {
			t.Errorf("GPU %s: %+v, want %+v", r.Group, r, w)
		}
		if i > 0 && rep.Rows[i-1].MemoryGiBHours < r.MemoryGiBHours {
			t.Errorf("rows not by memory-hours, largest first: %s before %s", rep.Rows[i-1].Group, r.Group)
		}
	}
	total := Row{Jobs: 3, Died: 1, PeakBytes: 8 << 30}
	for _, w := range want {
		total.MemoryGiBHours += w.MemoryGiBHours
		total.HeldHours += w.HeldHours
		total.BusyHours += w.BusyHours
		total.IdleHours += w.IdleHours
	}
	if !same(rep.Total, total) || rep.Total.Group != "total" || len(rep.Total.DiedWhy) != 1 {
		t.Errorf("total %+v, want %+v", rep.Total, total)
	}
	// by user and by job the same samples count by the job's totals
	for _, tt := range []struct {
		by   string
		want map[string]Row
	}{
		{ByUser, map[string]Row{
			"ana": {Jobs: 1, MemoryGiBHours: (10*30 + 11*30) * h, HeldHours: 60 * h, BusyHours: 60 * h, PeakBytes: 11 << 30, Died: 1},
			"ben": {Jobs: 2, MemoryGiBHours: 6 * 60 * h, HeldHours: 60 * h, BusyHours: 60 * h, PeakBytes: 6 << 30},
		}},
		{ByJob, map[string]Row{
			"ddp": {Jobs: 1, MemoryGiBHours: (10*30 + 11*30) * h, HeldHours: 60 * h, BusyHours: 60 * h, PeakBytes: 11 << 30, Died: 1},
			"old": {Jobs: 1, MemoryGiBHours: 6 * 60 * h, HeldHours: 60 * h, BusyHours: 60 * h, PeakBytes: 6 << 30},
			"cpu": {Jobs: 1},
		}},
	} {
		rep := Compute(jobs, tt.by, 1, t0, t0.Add(time.Hour))
		if len(rep.Rows) != len(tt.want) {
			t.Fatalf("by %s: rows %+v", tt.by, rep.Rows)
		}
		for _, r := range rep.Rows {
			if w := tt.want[r.Group]; !same(r, w) {
				t.Errorf("by %s, %s: %+v, want %+v", tt.by, r.Group, r, w)
			}
		}
	}
}

// samples is one series of n points, the i-th p(i) at t0 + i steps.
func samples(t0 time.Time, step time.Duration, n int, p func(i int) timeline.Point) []Series {
	s := Series{Step: step}
	for i := range n {
		q := p(i)
		q.T = t0.Add(time.Duration(i) * step).UnixMilli()
		s.Points = append(s.Points, q)
	}
	return []Series{s}
}

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
