package snapshot

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/units"
)

// Site is one place in Python code that holds live CUDA memory.
type Site struct {
	// Site is "file:line function", or "?" for blocks recorded without a
	// Python stack.
	Site      string `json:"site"`
	File      string `json:"file"`
	Line      int64  `json:"line"`
	Function  string `json:"function"`
	Bytes     int64  `json:"bytes"`
	Requested int64  `json:"requested_bytes"`
	Blocks    int    `json:"blocks"`
	// OOMBytes is what an allocation at this site asked for when the
	// device ran out (the device's last OOM); 0 for the other sites.
	OOMBytes int64 `json:"oom_bytes,omitempty"`
}

// SiteOf is the frame a stack is charged to: the innermost Python frame
// that is not inside torch itself, so a Linear layer's weight is charged to
// the model code that built it; when every frame is torch's, the innermost
// Python frame. nil when the stack holds no Python frame.
func SiteOf(st *Stack) *Frame {
	if st == nil {
		return nil
	}
	var first *Frame
	for i := range st.Len() {
		f := st.Frame(i)
		if !strings.HasSuffix(f.File, ".py") {
			continue // C++ frames of stacks="all"
		}
		if first == nil {
			first = f
		}
		if !insideTorch(f.File) {
			return f
		}
	}
	return first
}

// insideTorch is whether file lies in a torch directory, on a POSIX or a
// Windows path (D:\venv\Lib\site-packages\torch\functional.py).
func insideTorch(file string) bool {
	file = strings.ReplaceAll(file, "\\", "/")
	return strings.Contains(file, "/torch/") || strings.HasPrefix(file, "torch/")
}

// SiteName names a site as the tables print it.
func SiteName(f *Frame) string {
	if f == nil {
		return "?"
	}
	return fmt.Sprintf("%s:%d %s", f.File, f.Line, f.Function)
}

// Sites sums the live (active_allocated) blocks of device (-1: every
// device) by allocation site, largest first.
func (s *Snapshot) Sites(device int) []Site {
	sums := map[*Frame]*Site{}
	var unknown *Site
	for _, seg := range s.Segments {
		if device >= 0 && seg.Device != device {
			continue
		}
		for i := range seg.Blocks {
			b := &seg.Blocks[i]
			if b.State != ActiveAllocated {
				continue
			}
			f := SiteOf(b.AllocStack())
			var st *Site
			if f == nil {
				if unknown == nil {
					unknown = &Site{Site: "?", File: "?"}
				}
				st = unknown
			} else if st = sums[f]; st == nil {
				st = &Site{Site: SiteName(f), File: f.File, Line: f.Line, Function: f.Function}
				sums[f] = st
			}
			st.Bytes = satAdd(st.Bytes, b.Size)
			st.Requested = satAdd(st.Requested, b.Requested())
			st.Blocks++
		}
	}
	// distinct Frames can name one site (the JSON form repeats frames)
	byName := map[string]*Site{}
	for _, st := range sums {
		if o := byName[st.Site]; o != nil {
			o.Bytes = satAdd(o.Bytes, st.Bytes)
			o.Requested = satAdd(o.Requested, st.Requested)
			o.Blocks += st.Blocks
			continue
		}
		byName[st.Site] = st
	}
	out := make([]Site, 0, len(byName)+1)
	for _, st := range byName {
		out = append(out, *st)
	}
	if unknown != nil {
		out = append(out, *unknown)
	}
	slices.SortFunc(out, func(a, b Site) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Site, b.Site))
	})
	return out
}

// SiteTable is Sites with each device's last OOM charged to its site: the
// allocation that failed marks its site (OOMBytes), which comes first, and
// is listed even when it holds no live bytes.
func (s *Snapshot) SiteTable(device int) []Site {
	sites := s.Sites(device)
	var first []Site
	for dev, tr := range s.Traces {
		if device >= 0 && dev != device {
			continue
		}
		for i := len(tr) - 1; i >= 0; i-- {
			e := tr[i]
			if e.Action != ActionOOM {
				continue
			}
			f := SiteOf(e.Stack)
			name := SiteName(f)
			k := slices.IndexFunc(sites, func(st Site) bool { return st.Site == name })
			if k < 0 {
				if k = slices.IndexFunc(first, func(st Site) bool { return st.Site == name }); k >= 0 {
					first[k].OOMBytes = satAdd(first[k].OOMBytes, max(e.Size, 0))
					break
				}
				st := Site{Site: name, File: "?"}
				if f != nil {
					st.File, st.Line, st.Function = f.File, f.Line, f.Function
				}
				sites = append(sites, st)
				k = len(sites) - 1
			}
			st := sites[k]
			st.OOMBytes = satAdd(st.OOMBytes, max(e.Size, 0))
			first = append(first, st)
			sites = slices.Delete(sites, k, k+1)
			break
		}
	}
	return append(first, sites...)
}

// DeviceSummary is what one device's part of a snapshot adds up to.
type DeviceSummary struct {
	Device int `json:"device"`
	// Reserved is the bytes of every segment; Allocated those of live
	// blocks; Active adds blocks freed by the program but still in use by
	// a stream (active_pending_free); Requested is what the program asked
	// for in the live blocks (before rounding).
	Reserved    int64 `json:"reserved_bytes"`
	Allocated   int64 `json:"allocated_bytes"`
	Active      int64 `json:"active_bytes"`
	Requested   int64 `json:"requested_bytes"`
	PendingFree int64 `json:"pending_free_bytes"`
	// Free is the bytes of inactive blocks: cached, inside segments.
	Free int64 `json:"free_bytes"`
	// LargestFree is the largest inactive block; LargestFreeLarge the
	// largest in the large pool, which is all that an allocation over
	// 1 MiB can be given without a new segment.
	LargestFree      int64 `json:"largest_free_block"`
	LargestFreeLarge int64 `json:"largest_free_large_block"`
	FreeBlocks       int   `json:"free_blocks"`
	LiveBlocks       int   `json:"live_blocks"` // active_allocated
	Blocks           int   `json:"blocks"`
	Segments         int   `json:"segments"`
	Large            int   `json:"large_segments"`
	Small            int   `json:"small_segments"`
	Expandable       int   `json:"expandable_segments"`
	PrivatePool      int   `json:"private_pool_segments"`
	// Saturated is true when a sum passed the largest int64 and stopped
	// there: the file's sizes are no real allocator's.
	Saturated bool `json:"saturated,omitempty"`
	// Trace counts the trace's events by action.
	Trace []ActionCount `json:"trace"`
	OOM   *OOM          `json:"oom,omitempty"`
}

// ActionCount is how many trace events had one action.
type ActionCount struct {
	Action string `json:"action"`
	Count  int    `json:"count"`
}

// OOM is the account of the last out-of-memory a device's trace recorded.
type OOM struct {
	// Size is what was asked for; DeviceFree what the device had free
	// (cudaMemGetInfo) at the time.
	Size       int64  `json:"size"`
	DeviceFree int64  `json:"device_free"`
	TimeUS     int64  `json:"time_us,omitempty"`
	Stream     int64  `json:"stream"`
	Site       string `json:"site"`
	// At is the allocator's state at the OOM: the dump's with every later
	// event of the trace undone.
	At *OOMState `json:"at_oom"`
	// Why it did not fit, in words from the state at the OOM.
	Reason string `json:"reason"`
}

// Summary adds up each device (or, device >= 0, that one).
func (s *Snapshot) Summary(device int) []DeviceSummary {
	var out []DeviceSummary
	for _, dev := range s.Devices() {
		if device >= 0 && dev != device {
			continue
		}
		out = append(out, s.summarize(dev))
	}
	return out
}

func (s *Snapshot) summarize(dev int) DeviceSummary {
	d := DeviceSummary{Device: dev}
	for _, seg := range s.Segments {
		if seg.Device != dev {
			continue
		}
		d.Segments++
		if seg.Large {
			d.Large++
		} else {
			d.Small++
		}
		if seg.Expandable {
			d.Expandable++
		}
		if seg.Pool != [2]int64{} {
			d.PrivatePool++
		}
		for i := range seg.Blocks {
			b := &seg.Blocks[i]
			d.Blocks++
			d.Reserved = satAdd(d.Reserved, b.Size)
			switch b.State {
			case ActiveAllocated:
				d.LiveBlocks++
				d.Allocated = satAdd(d.Allocated, b.Size)
				d.Active = satAdd(d.Active, b.Size)
				d.Requested = satAdd(d.Requested, b.Requested())
			case ActivePendingFree:
				d.Active = satAdd(d.Active, b.Size)
				d.PendingFree = satAdd(d.PendingFree, b.Size)
			default:
				d.Free = satAdd(d.Free, b.Size)
				d.FreeBlocks++
				d.LargestFree = max(d.LargestFree, b.Size)
				if seg.Large {
					d.LargestFreeLarge = max(d.LargestFreeLarge, b.Size)
				}
			}
		}
	}
	for _, v := range []int64{d.Reserved, d.Allocated, d.Active, d.Requested, d.PendingFree, d.Free} {
		d.Saturated = d.Saturated || v == math.MaxInt64
	}
	if dev < len(s.Traces) {
		counts := map[Action]int{}
		oom := -1
		for i, e := range s.Traces[dev] {
			counts[e.Action]++
			if e.Action == ActionOOM {
				oom = i
			}
		}
		for a := ActionAlloc; a <= ActionOOM; a++ {
			if counts[a] > 0 {
				d.Trace = append(d.Trace, ActionCount{a.String(), counts[a]})
			}
		}
		if counts[ActionUnknown] > 0 {
			d.Trace = append(d.Trace, ActionCount{"other", counts[ActionUnknown]})
		}
		if oom >= 0 {
			e := s.Traces[dev][oom]
			d.OOM = &OOM{Size: e.Size, DeviceFree: e.DeviceFree, TimeUS: e.TimeUS, Stream: e.Stream,
				Site: SiteName(SiteOf(e.Stack)), At: s.stateAt(dev, oom)}
			d.OOM.Reason = oomReason(d.OOM)
		}
	}
	return d
}

// oomReason says why an allocation did not fit, from the allocator's state
// at the OOM and the device's free memory then.
func oomReason(o *OOM) string {
	at, size := o.At, o.Size
	switch {
	case at.LargestUsable >= size:
		return fmt.Sprintf("a cached free block of %s on its stream could have held it, and the allocator did not use it",
			fmtBytes(at.LargestUsable))
	case at.Unusable != "":
		return fmt.Sprintf("a cached free block of %s could have held it, but it was %s",
			fmtBytes(at.LargestFree), at.Unusable)
	case at.CachedFree >= size:
		return fmt.Sprintf("fragmentation: the cache held %s free, enough in total, but the largest piece it could use was %s; "+
			"a new segment needed %s and the device had %s free",
			fmtBytes(at.CachedFree), fmtBytes(at.LargestUsable), fmtBytes(size), fmtBytes(o.DeviceFree))
	default:
		return fmt.Sprintf("memory in use: %s allocated by live tensors (%s pending free), %s free in the cache "+
			"(largest usable block %s) and %s free on the device, less than the %s asked for",
			fmtBytes(at.Allocated), fmtBytes(at.PendingFree), fmtBytes(at.CachedFree), fmtBytes(at.LargestUsable),
			fmtBytes(o.DeviceFree), fmtBytes(size))
	}
}

func fmtBytes(n int64) string { return units.FormatBytes(n) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// satAdd is a+b for sizes, which are never negative: a sum past the largest
// int64 stays there (a file can claim any sizes; the figures say so).
func satAdd(a, b int64) int64 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxInt64
}

// SegmentRow is one segment as the segments table shows it.
type SegmentRow struct {
	Device      int      `json:"device"`
	Address     uint64   `json:"address"`
	Type        string   `json:"type"` // large, small
	Expandable  bool     `json:"expandable"`
	Pool        [2]int64 `json:"pool"`
	Stream      int64    `json:"stream"`
	Total       int64    `json:"total_bytes"`
	Allocated   int64    `json:"allocated_bytes"`
	Active      int64    `json:"active_bytes"`
	Free        int64    `json:"free_bytes"`
	LargestFree int64    `json:"largest_free_block"`
	Blocks      int      `json:"blocks"`
	Site        string   `json:"site"` // what allocated the segment
}

// SegmentRows lists device's segments (-1: all), by device then address.
// The sizes are summed from the blocks, not read from the segment's own
// totals, so a file whose totals disagree with its blocks shows what the
// blocks hold.
func (s *Snapshot) SegmentRows(device int) []SegmentRow {
	var out []SegmentRow
	for _, seg := range s.Segments {
		if device >= 0 && seg.Device != device {
			continue
		}
		r := SegmentRow{Device: seg.Device, Address: seg.Address, Type: "small", Expandable: seg.Expandable,
			Pool: seg.Pool, Stream: seg.Stream, Blocks: len(seg.Blocks), Site: SiteName(SiteOf(seg.Stack))}
		if seg.Large {
			r.Type = "large"
		}
		for i := range seg.Blocks {
			b := &seg.Blocks[i]
			r.Total = satAdd(r.Total, b.Size)
			switch b.State {
			case ActiveAllocated:
				r.Allocated = satAdd(r.Allocated, b.Size)
				r.Active = satAdd(r.Active, b.Size)
			case ActivePendingFree:
				r.Active = satAdd(r.Active, b.Size)
			default:
				r.Free = satAdd(r.Free, b.Size)
				r.LargestFree = max(r.LargestFree, b.Size)
			}
		}
		if seg.Stack == nil || seg.Stack.Len() == 0 {
			r.Site = "?"
			for i := range seg.Blocks {
				if st := seg.Blocks[i].AllocStack(); st != nil && st.Len() > 0 {
					r.Site = SiteName(SiteOf(st))
					break
				}
			}
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b SegmentRow) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Address, b.Address))
	})
	return out
}

// TraceQuery selects trace events.
type TraceQuery struct {
	Device  int    // -1: every device
	SinceUS int64  // only events at or after the first event's time plus this
	Site    string // only events whose site contains this
	MinSize int64  // only events of at least this many bytes
	Action  string // only events of this action ("" any)
}

// TraceRow is one trace event.
type TraceRow struct {
	Index      int    `json:"index"` // within its device's trace
	Device     int    `json:"device"`
	Action     string `json:"action"`
	Addr       uint64 `json:"addr"`
	Size       int64  `json:"size"`
	Stream     int64  `json:"stream"`
	TimeUS     int64  `json:"time_us"`     // as recorded (0 before torch 2.2)
	OffsetUS   int64  `json:"offset_us"`   // since the device's first event
	DeviceFree int64  `json:"device_free"` // oom events
	Site       string `json:"site"`
	Stack      *Stack `json:"-"`
}

// Trace lists the events q selects, each device in order.
func (s *Snapshot) Trace(q TraceQuery) []TraceRow {
	var out []TraceRow
	for dev, tr := range s.Traces {
		if q.Device >= 0 && dev != q.Device {
			continue
		}
		var t0 int64
		if len(tr) > 0 {
			t0 = tr[0].TimeUS
		}
		for i, e := range tr {
			if q.SinceUS > 0 && e.TimeUS-t0 < q.SinceUS {
				continue
			}
			if e.Size < q.MinSize {
				continue
			}
			if q.Action != "" && e.Action.String() != q.Action {
				continue
			}
			site := SiteName(SiteOf(e.Stack))
			if q.Site != "" && !strings.Contains(site, q.Site) {
				continue
			}
			out = append(out, TraceRow{Index: i, Device: dev, Action: e.Action.String(), Addr: e.Addr, Size: e.Size,
				Stream: e.Stream, TimeUS: e.TimeUS, OffsetUS: e.TimeUS - t0, DeviceFree: e.DeviceFree, Site: site, Stack: e.Stack})
		}
	}
	return out
}

// SiteDiff is one site's live memory in two snapshots.
type SiteDiff struct {
	Site    string `json:"site"`
	BytesA  int64  `json:"bytes_a"`
	BytesB  int64  `json:"bytes_b"`
	Delta   int64  `json:"delta"`
	BlocksA int    `json:"blocks_a"`
	BlocksB int    `json:"blocks_b"`
	// Status is "new" (only in B), "vanished" (only in A), "grew",
	// "shrank" or "same".
	Status string `json:"status"`
}

// DeviceDiff is one device's totals in two snapshots.
type DeviceDiff struct {
	Device     int   `json:"device"`
	ReservedA  int64 `json:"reserved_a"`
	ReservedB  int64 `json:"reserved_b"`
	AllocatedA int64 `json:"allocated_a"`
	AllocatedB int64 `json:"allocated_b"`
	SegmentsA  int   `json:"segments_a"`
	SegmentsB  int   `json:"segments_b"`
}

// Diff is the growth from snapshot A to snapshot B.
type Diff struct {
	Devices []DeviceDiff `json:"devices"`
	// Sites are every site of either snapshot, the one that grew most
	// first (a leak), the one that shrank most last.
	Sites []SiteDiff `json:"sites"`
}

// Compare computes the growth from a to b, by site over every device.
func Compare(a, b *Snapshot) Diff {
	var d Diff
	sa, sb := a.Summary(-1), b.Summary(-1)
	n := max(len(sa), len(sb))
	for i := 0; i < n; i++ {
		dd := DeviceDiff{Device: i}
		if i < len(sa) {
			dd.ReservedA, dd.AllocatedA, dd.SegmentsA = sa[i].Reserved, sa[i].Allocated, sa[i].Segments
		}
		if i < len(sb) {
			dd.ReservedB, dd.AllocatedB, dd.SegmentsB = sb[i].Reserved, sb[i].Allocated, sb[i].Segments
		}
		d.Devices = append(d.Devices, dd)
	}
	m := map[string]*SiteDiff{}
	for _, s := range a.Sites(-1) {
		m[s.Site] = &SiteDiff{Site: s.Site, BytesA: s.Bytes, BlocksA: s.Blocks}
	}
	for _, s := range b.Sites(-1) {
		x := m[s.Site]
		if x == nil {
			x = &SiteDiff{Site: s.Site}
			m[s.Site] = x
		}
		x.BytesB, x.BlocksB = s.Bytes, s.Blocks
	}
	for _, x := range m {
		x.Delta = x.BytesB - x.BytesA
		switch {
		case x.BlocksA == 0:
			x.Status = "new"
		case x.BlocksB == 0:
			x.Status = "vanished"
		case x.Delta > 0:
			x.Status = "grew"
		case x.Delta < 0:
			x.Status = "shrank"
		default:
			x.Status = "same"
		}
		d.Sites = append(d.Sites, *x)
	}
	slices.SortFunc(d.Sites, func(p, q SiteDiff) int {
		return cmp.Or(cmp.Compare(q.Delta, p.Delta), cmp.Compare(q.BytesB, p.BytesB), cmp.Compare(p.Site, q.Site))
	})
	return d
}
