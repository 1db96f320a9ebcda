package supervise

import (
	"encoding/json"
	"time"

	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/timeline"
)

// cellRing is how many samples the cell tracker keeps, for a cell_start
// that is handed over after samples taken during the cell.
const cellRing = 64

type rssAt struct {
	t   time.Time
	rss uint64
}

// cellTrack folds a notebook kernel's cell and autosave events, and the
// supervisor's samples of its tree, into the post-mortem's kernel section:
// which cell ran when, what each changed, which one was running at the end,
// and how much host memory the running one added by the samples.
type cellTrack struct {
	ring    []rssAt
	cells   []postmortem.Cell
	total   int
	running map[cellKey]int // index into cells of each cell started and not ended
	// base and peak are the sampled tree RSS before and during each
	// running cell
	base, peak map[cellKey]*uint64
	autosave   *postmortem.Autosave
	seen       bool
}

type cellKey struct{ pid, n int }

func newCellTrack(prior *postmortem.Autosave) *cellTrack {
	return &cellTrack{running: map[cellKey]int{}, base: map[cellKey]*uint64{}, peak: map[cellKey]*uint64{}, autosave: prior}
}

// sample takes one sample of the kernel's tree.
func (c *cellTrack) sample(t time.Time, rss uint64) {
	if len(c.ring) == cellRing {
		copy(c.ring, c.ring[1:])
		c.ring = c.ring[:cellRing-1]
	}
	c.ring = append(c.ring, rssAt{t, rss})
	for k, i := range c.running {
		if !t.Before(c.cells[i].Start) {
			c.peak[k] = maxU(c.peak[k], rss)
		}
	}
}

// event folds one probe event in (other kinds are ignored).
func (c *cellTrack) event(e timeline.Event) {
	switch e.Kind {
	case timeline.KindCellStart, timeline.KindCell:
		var d timeline.CellData
		if json.Unmarshal(e.Data, &d) != nil {
			return
		}
		c.seen = true
		k := cellKey{d.PID, d.ExecutionCount}
		if e.Kind == timeline.KindCellStart {
			c.start(k, d)
			return
		}
		i, ok := c.running[k]
		if !ok {
			// its start was not heard (the probe came up in the cell)
			c.start(k, d)
			i = c.running[k]
		}
		cell := postmortem.Cell{CellData: d}
		if d.End != nil && len(c.ring) > 0 && !c.ring[0].t.After(d.Start) {
			// The ring covers the cell: its peak from the samples taken
			// up to its end only (the event comes at the next tick,
			// after samples taken since).
			c.peak[k] = nil
			for _, s := range c.ring {
				if !s.t.Before(d.Start) && !s.t.After(*d.End) {
					c.peak[k] = maxU(c.peak[k], s.rss)
				}
			}
		}
		c.growth(k, &cell)
		c.cells[i] = cell
		delete(c.running, k)
		delete(c.base, k)
		delete(c.peak, k)
	case timeline.KindCheckpoint:
		var d timeline.CheckpointData
		if json.Unmarshal(e.Data, &d) != nil || !d.Autosave || d.Script != "" {
			return // a script's autosave is not a kernel's
		}
		c.seen = true
		if c.autosave == nil || !e.T.Before(c.autosave.T) {
			c.autosave = &postmortem.Autosave{Path: d.Path, T: e.T, Objects: d.Objects, Bytes: d.Bytes}
		}
	}
}

func (c *cellTrack) start(k cellKey, d timeline.CellData) {
	if _, ok := c.running[k]; ok {
		return // told twice
	}
	c.total++
	c.cells = append(c.cells, postmortem.Cell{CellData: d})
	c.running[k] = len(c.cells) - 1
	// Samples already taken: the last before the start is the base, those
	// since then make the peak so far.
	c.base[k], c.peak[k] = nil, nil
	for _, s := range c.ring {
		if s.t.Before(d.Start) {
			v := s.rss
			c.base[k] = &v
		} else {
			c.peak[k] = maxU(c.peak[k], s.rss)
		}
	}
	c.trim()
}

// trim keeps the newest MaxCells cells, never dropping a running one.
func (c *cellTrack) trim() {
	drop := len(c.cells) - postmortem.MaxCells
	if drop <= 0 {
		return
	}
	running := map[int]cellKey{}
	for k, i := range c.running {
		running[i] = k
	}
	out := make([]postmortem.Cell, 0, postmortem.MaxCells)
	for i, cell := range c.cells {
		k, isRunning := running[i]
		if drop > 0 && !isRunning {
			drop--
			continue
		}
		if isRunning {
			c.running[k] = len(out)
		}
		out = append(out, cell)
	}
	c.cells = out
}

// growth sets a cell's sampled growth: peak during it less the base.
func (c *cellTrack) growth(k cellKey, cell *postmortem.Cell) {
	b, p := c.base[k], c.peak[k]
	if b == nil || p == nil {
		return
	}
	g := int64(*p) - int64(*b)
	cell.HostGrowth = &g
}

// section is the post-mortem's kernel section at the attempt's end; nil
// when the job reported no cells and no autosave (no notebook kernel).
func (c *cellTrack) section(end time.Time) *postmortem.Kernel {
	if !c.seen && c.autosave == nil {
		return nil
	}
	k := &postmortem.Kernel{Cells: append([]postmortem.Cell{}, c.cells...), CellsTotal: c.total}
	last := -1
	for key, i := range c.running {
		c.growth(key, &k.Cells[i])
		if i > last {
			last = i
		}
	}
	if last >= 0 {
		r := k.Cells[last]
		k.Running = &r
	}
	if c.autosave != nil {
		a := *c.autosave
		a.AgeS = end.Sub(a.T).Seconds()
		k.Autosave = &a
	}
	return k
}

func maxU(p *uint64, v uint64) *uint64 {
	if p == nil || v > *p {
		return &v
	}
	return p
}
