package snapshot

import (
	"cmp"
	"slices"
)

// ViewOptions bound what View sends to a browser, so a snapshot of any
// size draws at once: the timeline is cut to Points points, the sites
// drawn apart to Sites (the rest is "other"), the segment map to the
// Segments largest segments and Blocks blocks in all (past that,
// neighbouring blocks of one state merge, and past that again neighbouring
// runs merge into "mixed" blocks that give their bytes by state).
type ViewOptions struct {
	Device   int
	Points   int
	Sites    int
	Blocks   int
	Segments int
}

// DefaultView fits a dashboard panel, in about 1 MB of JSON at most.
var DefaultView = ViewOptions{Points: 600, Sites: 12, Blocks: 8000, Segments: 2000}

// View is the dashboard's picture of one device: what the page draws,
// downsampled on the server.
type View struct {
	Device  int           `json:"device"`
	Devices []int         `json:"devices"`
	Schema  string        `json:"schema"`
	Summary DeviceSummary `json:"summary"`
	// Sites are the drawn sites (index = colour), the last "other" when
	// more sites held memory than were drawn apart.
	Sites []ViewSite `json:"sites"`
	// Timeline is the live bytes of each drawn site over the trace's
	// events (memory_viz's active memory timeline): Events[i] is the event
	// index of point i, Live[s][i] the bytes site s held then. Each point
	// is the event of its stretch where the total was highest, so a peak is
	// never smoothed away.
	Timeline ViewTimeline `json:"timeline"`
	// Segments is the segment map.
	Segments []ViewSegment `json:"segments"`
	// Stacks are the stacks the page can show, by the ids blocks and
	// sites refer to.
	Stacks [][]ViewFrame `json:"stacks"`
	// Merged is true when blocks were merged to fit Blocks.
	Merged bool `json:"merged"`
	// SegmentsOmitted counts the device's segments past the Segments
	// largest, not drawn.
	SegmentsOmitted int `json:"segments_omitted,omitempty"`
}

// ViewSite is one site of the view.
type ViewSite struct {
	Site   string `json:"site"`
	Bytes  int64  `json:"bytes"`
	Blocks int    `json:"blocks"`
	Stack  int    `json:"stack"` // -1: none
}

// ViewTimeline is the downsampled active memory timeline.
type ViewTimeline struct {
	Events  []int     `json:"events"`
	TimesUS []int64   `json:"times_us,omitempty"`
	Live    [][]int64 `json:"live"`
	Total   []int64   `json:"total"`
	NEvents int       `json:"n_events"`
}

// ViewSegment is one segment of the map.
type ViewSegment struct {
	Address uint64      `json:"address"`
	Total   int64       `json:"total"`
	Type    string      `json:"type"`
	Blocks  []ViewBlock `json:"blocks"`
}

// ViewBlock is one block, or, merged, a run of Count neighbouring blocks:
// of one state, or of several ("mixed", whose bytes by state are Live,
// Pending and Free).
type ViewBlock struct {
	Offset  int64  `json:"offset"`
	Size    int64  `json:"size"`
	State   string `json:"state"`
	Site    int    `json:"site"`  // index into Sites; -1 for free blocks, and runs of several sites
	Stack   int    `json:"stack"` // index into Stacks; -1 when none
	Count   int    `json:"count,omitempty"`
	Live    int64  `json:"live,omitempty"`
	Pending int64  `json:"pending,omitempty"`
	Free    int64  `json:"free,omitempty"`
}

// ViewFrame is one frame of a shown stack.
type ViewFrame struct {
	File     string `json:"file"`
	Line     int64  `json:"line"`
	Function string `json:"function"`
}

// View computes the picture of o.Device.
func (s *Snapshot) View(o ViewOptions) View {
	if o.Points <= 0 {
		o.Points = DefaultView.Points
	}
	if o.Sites <= 0 {
		o.Sites = DefaultView.Sites
	}
	if o.Blocks <= 0 {
		o.Blocks = DefaultView.Blocks
	}
	if o.Segments <= 0 {
		o.Segments = DefaultView.Segments
	}
	v := View{Device: o.Device, Devices: s.Devices(), Schema: string(s.Schema)}
	if sum := s.Summary(o.Device); len(sum) == 1 {
		v.Summary = sum[0]
	}
	stackIDs := map[*Stack]int{}
	stackID := func(st *Stack) int {
		if st == nil || st.Len() == 0 {
			return -1
		}
		if id, ok := stackIDs[st]; ok {
			return id
		}
		id := len(v.Stacks)
		stackIDs[st] = id
		fr := make([]ViewFrame, st.Len())
		for i, f := range st.Frames() {
			fr[i] = ViewFrame{f.File, f.Line, f.Function}
		}
		v.Stacks = append(v.Stacks, fr)
		return id
	}

	// sites: the largest by live bytes at the snapshot, then those the
	// trace allocated most, each with one stack that shows it
	siteIdx := map[string]int{}
	siteStack := map[string]*Stack{}
	for _, seg := range s.Segments {
		if seg.Device != o.Device {
			continue
		}
		for i := range seg.Blocks {
			st := seg.Blocks[i].AllocStack()
			if n := SiteName(SiteOf(st)); siteStack[n] == nil && st != nil {
				siteStack[n] = st
			}
		}
	}
	var trace []*TraceEntry
	if o.Device < len(s.Traces) {
		trace = s.Traces[o.Device]
	}
	traceBytes := map[string]int64{}
	for _, e := range trace {
		if e.Action == ActionAlloc {
			n := SiteName(SiteOf(e.Stack))
			traceBytes[n] = satAdd(traceBytes[n], e.Size)
			if siteStack[n] == nil && e.Stack != nil {
				siteStack[n] = e.Stack
			}
		}
	}
	for _, st := range s.Sites(o.Device) {
		if len(v.Sites) >= o.Sites {
			break
		}
		siteIdx[st.Site] = len(v.Sites)
		v.Sites = append(v.Sites, ViewSite{Site: st.Site, Bytes: st.Bytes, Blocks: st.Blocks, Stack: stackID(siteStack[st.Site])})
	}
	type tb struct {
		name  string
		bytes int64
	}
	var extra []tb
	for n, b := range traceBytes {
		if _, ok := siteIdx[n]; !ok {
			extra = append(extra, tb{n, b})
		}
	}
	slices.SortFunc(extra, func(a, b tb) int { return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.name, b.name)) })
	for _, x := range extra {
		if len(v.Sites) >= o.Sites {
			break
		}
		siteIdx[x.name] = len(v.Sites)
		v.Sites = append(v.Sites, ViewSite{Site: x.name, Stack: stackID(siteStack[x.name])})
	}
	other := -1
	siteOf := func(st *Stack) int {
		if i, ok := siteIdx[SiteName(SiteOf(st))]; ok {
			return i
		}
		if other < 0 {
			other = len(v.Sites)
			v.Sites = append(v.Sites, ViewSite{Site: "other", Stack: -1})
		}
		return other
	}

	v.Timeline = timeline(trace, siteOf, o.Points)

	// the segment map: the largest segments, each a bar of its blocks
	var segs []*Segment
	for _, seg := range s.Segments {
		if seg.Device == o.Device {
			segs = append(segs, seg)
		}
	}
	if len(segs) > o.Segments {
		slices.SortStableFunc(segs, func(a, b *Segment) int { return cmp.Compare(b.TotalSize, a.TotalSize) })
		v.SegmentsOmitted = len(segs) - o.Segments
		segs = segs[:o.Segments]
	}
	nblocks := 0
	for _, seg := range segs {
		nblocks += len(seg.Blocks)
	}
	v.Merged = nblocks > o.Blocks
	// merged, each segment's blocks are first runs of one state; when the
	// runs are still too many, each segment gets a share of o.Blocks by
	// its runs, and neighbouring runs merge to fit it
	runs := make([][]ViewBlock, len(segs))
	nruns := 0
	for k, seg := range segs {
		var off int64
		for i := range seg.Blocks {
			b := &seg.Blocks[i]
			vb := ViewBlock{Offset: off, Size: b.Size, State: b.State.String(), Site: -1, Stack: -1}
			off = satAdd(off, b.Size)
			if b.State != Inactive {
				st := b.AllocStack()
				vb.Site = siteOf(st)
				if !v.Merged {
					vb.Stack = stackID(st)
				}
			}
			if v.Merged {
				vb.Count = 1
				if n := len(runs[k]); n > 0 && runs[k][n-1].State == vb.State {
					p := &runs[k][n-1]
					p.Size = satAdd(p.Size, vb.Size)
					p.Count++
					if p.Site != vb.Site {
						p.Site = -1
					}
					continue
				}
			}
			runs[k] = append(runs[k], vb)
		}
		nruns += len(runs[k])
	}
	for k, seg := range segs {
		vs := ViewSegment{Address: seg.Address, Total: seg.TotalSize, Type: "small"}
		if seg.Large {
			vs.Type = "large"
		}
		vs.Blocks = runs[k]
		if nruns > o.Blocks {
			share := max(1, len(runs[k])*o.Blocks/nruns)
			vs.Blocks = mergeRuns(runs[k], share)
		}
		v.Segments = append(v.Segments, vs)
	}
	slices.SortFunc(v.Segments, func(a, b ViewSegment) int { return cmp.Compare(a.Address, b.Address) })
	return v
}

// mergeRuns merges neighbouring runs into at most n blocks, each of about
// as many runs; a block of runs of several states is "mixed".
func mergeRuns(runs []ViewBlock, n int) []ViewBlock {
	if len(runs) <= n {
		return runs
	}
	out := make([]ViewBlock, 0, n)
	for i := 0; i < n; i++ {
		lo, hi := i*len(runs)/n, (i+1)*len(runs)/n
		m := runs[lo]
		m.Live, m.Pending, m.Free = 0, 0, 0
		m.Size, m.Count = 0, 0
		for _, r := range runs[lo:hi] {
			m.Size = satAdd(m.Size, r.Size)
			m.Count += r.Count
			switch r.State {
			case "active_allocated":
				m.Live = satAdd(m.Live, r.Size)
			case "active_pending_free":
				m.Pending = satAdd(m.Pending, r.Size)
			default:
				m.Free = satAdd(m.Free, r.Size)
			}
			if r.State != m.State {
				m.State = "mixed"
			}
			if r.Site != m.Site {
				m.Site = -1
			}
		}
		if m.State != "mixed" {
			m.Live, m.Pending, m.Free = 0, 0, 0
		}
		out = append(out, m)
	}
	return out
}

// timeline replays the trace: an alloc adds its bytes to its site, a
// free_completed takes them away (from the site that allocated the
// address). Blocks live before the trace began are the baseline.
func timeline(trace []*TraceEntry, siteOf func(*Stack) int, points int) ViewTimeline {
	tl := ViewTimeline{NEvents: len(trace)}
	if len(trace) == 0 {
		return tl
	}
	type live struct {
		site int
		size int64
	}
	// sites first, so every series has its index before the replay
	sites := make([]int, len(trace))
	nsites := 0
	for i, e := range trace {
		if e.Action == ActionAlloc {
			sites[i] = siteOf(e.Stack)
			nsites = max(nsites, sites[i]+1)
		}
	}
	byAddr := map[uint64]live{}
	cur := make([]int64, nsites)
	var total int64
	bucket := (len(trace) + points - 1) / points
	tl.Live = make([][]int64, nsites)
	var bestTotal int64 = -1
	var best []int64
	bestEvent := 0
	var bestTime int64
	flush := func() {
		tl.Events = append(tl.Events, bestEvent)
		tl.TimesUS = append(tl.TimesUS, bestTime)
		tl.Total = append(tl.Total, bestTotal)
		for s := range tl.Live {
			tl.Live[s] = append(tl.Live[s], best[s])
		}
		bestTotal = -1
	}
	best = make([]int64, nsites)
	for i, e := range trace {
		switch e.Action {
		case ActionAlloc:
			byAddr[e.Addr] = live{sites[i], e.Size}
			cur[sites[i]] = satAdd(cur[sites[i]], e.Size)
			total = satAdd(total, e.Size)
		case ActionFreeCompleted:
			if l, ok := byAddr[e.Addr]; ok {
				cur[l.site] -= l.size
				total -= l.size
				delete(byAddr, e.Addr)
			}
		}
		if total > bestTotal {
			bestTotal, bestEvent, bestTime = total, i, e.TimeUS
			copy(best, cur)
		}
		if (i+1)%bucket == 0 || i == len(trace)-1 {
			flush()
		}
	}
	return tl
}
