package supervise

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/timeline"
)

func cellEvent(kind string, t0 time.Time, pid, n int, startS, endS float64, rssDelta int64) timeline.Event {
	d := timeline.CellData{PID: pid, ExecutionCount: n, FirstLine: "cell", Start: t0.Add(time.Duration(startS * float64(time.Second)))}
	at := d.Start
	if kind == timeline.KindCell {
		end := t0.Add(time.Duration(endS * float64(time.Second)))
		d.End, d.Seconds, d.RSSDelta, at = &end, endS-startS, rssDelta, end
	}
	b, _ := json.Marshal(d)
	return timeline.Event{T: at, Kind: kind, Data: b}
}

// TestCellTrack follows cells and samples as the supervisor hands them
// over: events come at the next sample tick, after samples taken during
// the cell, and the growth is the sampled peak during the cell less the
// last sample before it.
func TestCellTrack(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	const MiB = 1 << 20
	c := newCellTrack(nil)
	if c.section(at(0)) != nil {
		t.Fatal("a job without cells has a kernel section")
	}
	// In[1]: 1.0-2.0 s; samples every 0.5 s, its events after the samples.
	c.sample(at(0.5), 100*MiB)
	c.sample(at(1.5), 180*MiB)
	c.event(cellEvent(timeline.KindCellStart, t0, 7, 1, 1.0, 0, 0))
	c.sample(at(2.1), 190*MiB) // after the cell: not in its peak
	c.event(cellEvent(timeline.KindCell, t0, 7, 1, 1.0, 2.0, 50*MiB))
	// In[2]: too short for any sample.
	c.event(cellEvent(timeline.KindCellStart, t0, 7, 2, 2.2, 0, 0))
	c.event(cellEvent(timeline.KindCell, t0, 7, 2, 2.2, 2.3, 0))
	// In[3] starts and grows until the end of the attempt.
	c.event(cellEvent(timeline.KindCellStart, t0, 7, 3, 2.5, 0, 0))
	for i, rss := range []uint64{400, 900, 700} {
		c.sample(at(3+float64(i)), rss*MiB)
	}
	as := timeline.CheckpointData{Path: "/w/autosave-1.pt", Autosave: true, Objects: []string{"model"}}
	b, _ := json.Marshal(as)
	c.event(timeline.Event{T: at(1), Kind: timeline.KindCheckpoint, Data: b})
	k := c.section(at(61))

	grow := func(v *int64) any {
		if v == nil {
			return nil
		}
		return *v / MiB
	}
	want := []struct {
		n      int
		growth any
		ended  bool
	}{{1, int64(80), true}, {2, nil, true}, {3, int64(710), false}}
	if len(k.Cells) != len(want) || k.CellsTotal != 3 {
		t.Fatalf("cells %+v (total %d), want 3", k.Cells, k.CellsTotal)
	}
	for i, w := range want {
		c := k.Cells[i]
		if c.ExecutionCount != w.n || grow(c.HostGrowth) != w.growth || (c.End != nil) != w.ended {
			t.Errorf("cell %d: In[%d] growth %v MiB ended %v; want In[%d] %v MiB ended %v", i, c.ExecutionCount, grow(c.HostGrowth), c.End != nil, w.n, w.growth, w.ended)
		}
	}
	if k.Running == nil || k.Running.ExecutionCount != 3 {
		t.Fatalf("running cell %+v, want In[3]", k.Running)
	}
	if got, want := k.RunningLine(), "In[3] was running (+710 MiB since it started)"; got != want {
		t.Errorf("RunningLine %q, want %q", got, want)
	}
	if k.Autosave == nil || k.Autosave.Path != as.Path || k.Autosave.AgeS != 60 {
		t.Errorf("autosave %+v, want %s 60 s old at the end", k.Autosave, as.Path)
	}
}

// TestCellTrackKeepsTheNewest keeps MaxCells cells, the running one among
// them however old it is.
func TestCellTrackKeepsTheNewest(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := newCellTrack(&postmortem.Autosave{Path: "/w/a.pt", T: t0})
	c.event(cellEvent(timeline.KindCellStart, t0, 7, 1, 0, 0, 0)) // never ends
	for n := 2; n <= 120; n++ {
		c.event(cellEvent(timeline.KindCellStart, t0, 7, n, float64(n), 0, 0))
		c.event(cellEvent(timeline.KindCell, t0, 7, n, float64(n), float64(n)+0.5, 0))
	}
	k := c.section(t0.Add(time.Hour))
	if k.CellsTotal != 120 || k.Running == nil || k.Running.ExecutionCount != 1 {
		t.Fatalf("total %d running %+v, want 120 and In[1]", k.CellsTotal, k.Running)
	}
	if len(k.Cells) > postmortem.MaxCells+1 || k.Cells[len(k.Cells)-1].ExecutionCount != 120 {
		t.Errorf("kept %d cells ending with In[%d], want at most %d ending with In[120]", len(k.Cells), k.Cells[len(k.Cells)-1].ExecutionCount, postmortem.MaxCells+1)
	}
	if k.Autosave == nil || k.Autosave.AgeS != 3600 {
		t.Errorf("prior autosave %+v, want 1 h old", k.Autosave)
	}
}
