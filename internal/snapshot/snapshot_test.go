package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// totals is what scripts/gen-snapshot-fixtures.py wrote next to a fixture:
// its own account of the allocator state it built the snapshot from.
type totals struct {
	Version string `json:"version"`
	Devices []struct {
		Device           int   `json:"device"`
		Reserved         int64 `json:"reserved"`
		Allocated        int64 `json:"allocated"`
		Active           int64 `json:"active"`
		Requested        int64 `json:"requested"`
		PendingFree      int64 `json:"pending_free"`
		Inactive         int64 `json:"inactive"`
		LargestFree      int64 `json:"largest_free"`
		LargestFreeLarge int64 `json:"largest_free_large"`
		Blocks           int   `json:"blocks"`
		Segments         struct {
			Total, Large, Small, Expandable int
			PrivatePool                     int `json:"private_pool"`
		} `json:"segments"`
		Sites []struct {
			Site   string `json:"site"`
			Bytes  int64  `json:"bytes"`
			Blocks int    `json:"blocks"`
		} `json:"sites"`
		Trace map[string]int `json:"trace"`
		OOM   *struct {
			Size       int64       `json:"size"`
			DeviceFree json.Number `json:"device_free"`
		} `json:"oom"`
	} `json:"devices"`
}

func readTotals(t *testing.T, fixture string) totals {
	t.Helper()
	name := strings.TrimSuffix(strings.TrimSuffix(fixture, ".pickle"), ".json") + ".totals.json"
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var tot totals
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&tot); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tot
}

func load(t *testing.T, fixture string) *Snapshot {
	t.Helper()
	s, err := ReadFile(filepath.Join("testdata", fixture), DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var fixtures = []struct {
	file   string
	schema Schema
}{
	{"v1_13_p2.pickle", Schema113},
	{"v2_0_p2.pickle", Schema20},
	{"v2_1_p4.pickle", Schema21},
	{"v2_2_p4.pickle", Schema22},
	{"v2_3_p5.pickle", Schema23},
	{"v2_6_p5.pickle", Schema23},
	{"v2_6_p2.pickle", Schema23},
	{"v2_6_cxx.pickle", Schema23},
	{"v2_6_json.json", Schema23},
	{"empty_device_p4.pickle", Schema23},
	{"huge_p5.pickle", Schema23},
	{"no_oom_p4.pickle", Schema22},
	{"fragmented_p4.pickle", Schema23},
	{"leak_step100.pickle", Schema23},
	{"leak_step1000.pickle", Schema23},
}

// TestSummaryMatchesGenerator: every figure of the summary equals the
// generator's own account of the state it wrote, in every schema and form.
func TestSummaryMatchesGenerator(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			s := load(t, fx.file)
			tot := readTotals(t, fx.file)
			if s.Schema != fx.schema {
				t.Errorf("schema %s, want %s", s.Schema, fx.schema)
			}
			sum := s.Summary(-1)
			if len(sum) != len(tot.Devices) {
				t.Fatalf("%d devices, want %d", len(sum), len(tot.Devices))
			}
			for i, want := range tot.Devices {
				got := sum[i]
				check := func(what string, g, w int64) {
					if g != w {
						t.Errorf("device %d %s = %d, want %d", want.Device, what, g, w)
					}
				}
				check("reserved", got.Reserved, want.Reserved)
				check("allocated", got.Allocated, want.Allocated)
				check("active", got.Active, want.Active)
				check("requested", got.Requested, want.Requested)
				check("pending free", got.PendingFree, want.PendingFree)
				check("free", got.Free, want.Inactive)
				check("largest free", got.LargestFree, want.LargestFree)
				check("largest free large", got.LargestFreeLarge, want.LargestFreeLarge)
				check("blocks", int64(got.Blocks), int64(want.Blocks))
				check("segments", int64(got.Segments), int64(want.Segments.Total))
				check("large", int64(got.Large), int64(want.Segments.Large))
				check("small", int64(got.Small), int64(want.Segments.Small))
				check("expandable", int64(got.Expandable), int64(want.Segments.Expandable))
				check("private pool", int64(got.PrivatePool), int64(want.Segments.PrivatePool))
				trace := map[string]int{}
				for _, a := range got.Trace {
					trace[a.Action] = a.Count
				}
				if len(trace) != len(want.Trace) {
					t.Errorf("device %d trace %v, want %v", want.Device, trace, want.Trace)
				}
				for a, n := range want.Trace {
					check("trace "+a, int64(trace[a]), int64(n))
				}
				switch {
				case want.OOM == nil && got.OOM != nil:
					t.Errorf("device %d: an OOM %+v where the generator wrote none", want.Device, got.OOM)
				case want.OOM != nil && got.OOM == nil:
					t.Errorf("device %d: no OOM", want.Device)
				case want.OOM != nil:
					check("oom size", got.OOM.Size, want.OOM.Size)
					wf, err := want.OOM.DeviceFree.Int64()
					if err != nil { // beyond int64: read as the saturated maximum
						wf = math.MaxInt64
					}
					check("oom device free", got.OOM.DeviceFree, wf)
				}
				sites := s.Sites(want.Device)
				if len(sites) != len(want.Sites) {
					t.Errorf("device %d: %d sites, want %d: %+v", want.Device, len(sites), len(want.Sites), sites)
					continue
				}
				for j, ws := range want.Sites {
					if sites[j].Site != ws.Site || sites[j].Bytes != ws.Bytes || sites[j].Blocks != ws.Blocks {
						t.Errorf("site %d = %s %d (%d blocks), want %s %d (%d)", j, sites[j].Site, sites[j].Bytes,
							sites[j].Blocks, ws.Site, ws.Bytes, ws.Blocks)
					}
				}
			}
		})
	}
}

// TestFormsAgree: one allocator state written by Python at protocols 2 and
// 5, by the C++ writer and as JSON decodes to the same figures, sites and
// trace.
func TestFormsAgree(t *testing.T) {
	ref := load(t, "v2_6_p5.pickle")
	for _, f := range []string{"v2_6_p2.pickle", "v2_6_cxx.pickle", "v2_6_json.json"} {
		s := load(t, f)
		if !reflect.DeepEqual(s.Summary(-1), ref.Summary(-1)) {
			t.Errorf("%s: summary %+v\nprotocol 5: %+v", f, s.Summary(-1), ref.Summary(-1))
		}
		if !reflect.DeepEqual(s.Sites(-1), ref.Sites(-1)) {
			t.Errorf("%s: sites differ", f)
		}
		if !reflect.DeepEqual(s.SegmentRows(-1), ref.SegmentRows(-1)) {
			t.Errorf("%s: segments differ", f)
		}
		a, b := s.Trace(TraceQuery{Device: -1}), ref.Trace(TraceQuery{Device: -1})
		for i := range a {
			a[i].Stack, b[i].Stack = nil, nil
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: trace differs", f)
		}
		if s.UserMetadata != ref.UserMetadata || len(s.AllocatorSettings) != len(ref.AllocatorSettings) ||
			s.ExternalAnnotations != ref.ExternalAnnotations {
			t.Errorf("%s: metadata %q %v %d, protocol 5 %q %v %d", f, s.UserMetadata, s.AllocatorSettings,
				s.ExternalAnnotations, ref.UserMetadata, ref.AllocatorSettings, ref.ExternalAnnotations)
		}
	}
}

// TestFramesShared: a stack recorded for many entries is one *Stack, and a
// frame in many stacks one *Frame, as the file shares them.
func TestFramesShared(t *testing.T) {
	for _, f := range []string{"v2_6_p5.pickle", "v2_6_p2.pickle", "v2_6_cxx.pickle"} {
		s := load(t, f)
		stacks := map[*Stack]int{}
		frames := map[*Frame]bool{}
		for _, tr := range s.Traces {
			for _, e := range tr {
				if e.Stack != nil && e.Stack.Len() > 0 {
					stacks[e.Stack]++
					for _, fr := range e.Stack.Frames() {
						frames[fr] = true
					}
				}
			}
		}
		shared := 0
		for _, n := range stacks {
			if n > 1 {
				shared++
			}
		}
		if shared == 0 {
			t.Errorf("%s: no stack shared between trace entries (%d stacks)", f, len(stacks))
		}
		if len(frames) != s.Frames {
			t.Errorf("%s: %d distinct frames in the trace, decoder counted %d", f, len(frames), s.Frames)
		}
		byName := map[Frame]int{}
		for fr := range frames {
			byName[*fr]++
		}
		for fr, n := range byName {
			if n > 1 {
				t.Errorf("%s: frame %+v decoded %d times, not shared", f, fr, n)
			}
		}
	}
}

// TestHugeValues: integers over 64 bits are clamped and counted, never
// wrapped; an address at or over 2^63 (a 9-byte LONG1) is kept whole.
func TestHugeValues(t *testing.T) {
	s := load(t, "huge_p5.pickle")
	if s.Saturated != 1 {
		t.Errorf("saturated %d, want 1 (the OOM's device_free of 2^65)", s.Saturated)
	}
	if got := s.Segments[0].Address; got != 0xFFFF_8000_0000_0000 {
		t.Errorf("first segment at %#x, want 0xffff800000000000", got)
	}
	if got := s.Summary(0)[0].OOM.DeviceFree; got != math.MaxInt64 {
		t.Errorf("device free %d, want the int64 maximum", got)
	}
}

func TestLong(t *testing.T) {
	tests := []struct {
		b    []byte
		want val
	}{
		{nil, val{k: kInt}},
		{[]byte{0xff}, val{k: kInt, i: -1}},
		{[]byte{0x7f}, val{k: kInt, i: 127}},
		{[]byte{0x80, 0x00}, val{k: kInt, i: 128}},
		{[]byte{0x00, 0x80}, val{k: kInt, i: -32768}},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0x80}, val{k: kInt, i: math.MinInt64}},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, val{k: kInt, i: math.MaxInt64}},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0x80, 0}, val{k: kUint, i: math.MinInt64}},            // 2^63
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0}, val{k: kUint, i: -1}},  // 2^64-1
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0, 1}, val{k: kBig, i: math.MaxInt64}},                // 2^64
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}, val{k: kBig, i: math.MinInt64}}, // -2^88
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, val{k: kInt, i: -1}},
		{[]byte{5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, val{k: kInt, i: 5}},
	}
	for _, tt := range tests {
		if got := long(tt.b); got.k != tt.want.k || got.i != tt.want.i {
			t.Errorf("long(% x) = %v %d, want %v %d", tt.b, got.k, got.i, tt.want.k, tt.want.i)
		}
	}
}

// TestRefuses: anything but plain data is refused as not a snapshot, with
// the reason; broken input fails with where it broke.
func TestRefuses(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"global", "\x80\x02cos\nsystem\nq\x00.", "it holds global os.system"},
		{"stack global", "\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93.", "it holds global os.system"},
		{"reduce", "\x80\x02N)\x85R.", "it holds a call (REDUCE)"},
		{"build", "\x80\x02}}b.", "it holds a call (BUILD)"},
		{"persid", "\x80\x02K\x01Q.", "persistent id"},
		{"protocol 0", "(dp0\n.", "neither a pickle"},
		{"text opcode", "\x80\x02I5\n.", "not one of"},
		{"protocol 1 header", "\x80\x01}.", "pickle protocol 1"},
		{"truncated", "\x80\x02}q\x00(X\x08\x00\x00\x00segm", "truncated"},
		{"no stop", "\x80\x02}", "truncated"},
		{"huge string", "\x80\x02X\xff\xff\xff\x7f", "over the"},
		{"memo before put", "\x80\x02h\x05.", "memo 5 read before"},
		{"not a dict", "\x80\x02K\x05.", "holds a int"},
		{"no segments", "\x80\x02}q\x00.", "no \"segments\""},
		{"device out of range", "\x80\x02]}(X\x06\x00\x00\x00deviceJ\x00\x00\x00\x40X\x0a\x00\x00\x00total_sizeK\x00ua.", "device 1073741824"},
		{"empty", "", "empty"},
		{"text", "hello", "neither a pickle"},
		{"bad json", "{\"segments\": [", "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(tt.in), DefaultLimits, nil)
			if err == nil {
				t.Fatal("decoded")
			}
			if !errors.Is(err, ErrNotSnapshot) {
				t.Errorf("%v does not wrap ErrNotSnapshot", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to say %q", err, tt.want)
			}
		})
	}
}

// TestLimits: a file that claims more than the limits allow stops there.
func TestLimits(t *testing.T) {
	lim := DefaultLimits
	lim.MaxString = 16
	_, err := Decode(strings.NewReader("\x80\x02X\x20\x00\x00\x00"+strings.Repeat("a", 32)+"."), lim, nil)
	if err == nil || !strings.Contains(err.Error(), "over the 16-byte limit") {
		t.Errorf("error %v", err)
	}
	lim = DefaultLimits
	lim.MaxMemo = 4
	// the memo is sparse: an index far out costs one entry, the fifth entry is refused
	_, err = Decode(strings.NewReader("\x80\x02Nr\x10\x00\x00\x00q\x01q\x02q\x03q\x04."), lim, nil)
	if err == nil || !strings.Contains(err.Error(), "memo over 4 entries") {
		t.Errorf("error %v", err)
	}
}

// TestDiffNamesTheLeak: between the step-100 and step-1000 snapshots of the
// known leak, the leaking site comes first, grown by what the generator
// added.
func TestDiffNamesTheLeak(t *testing.T) {
	a, b := load(t, "leak_step100.pickle"), load(t, "leak_step1000.pickle")
	d := Compare(a, b)
	if len(d.Sites) == 0 {
		t.Fatal("no sites")
	}
	top := d.Sites[0]
	if top.Site != "/home/user/train.py:57 train_step" {
		t.Errorf("first site %s, want the leak train.py:57", top.Site)
	}
	ta, tb := readTotals(t, "leak_step100.pickle"), readTotals(t, "leak_step1000.pickle")
	var wa, wb int64
	for _, s := range ta.Devices[0].Sites {
		if s.Site == top.Site {
			wa = s.Bytes
		}
	}
	for _, s := range tb.Devices[0].Sites {
		if s.Site == top.Site {
			wb = s.Bytes
		}
	}
	if top.BytesA != wa || top.BytesB != wb || top.Delta != wb-wa || top.Status != "grew" {
		t.Errorf("leak %+v, want %d -> %d", top, wa, wb)
	}
	for _, s := range d.Sites[1:] {
		if s.Delta != 0 {
			t.Errorf("site %s changed by %d: only the leak grew", s.Site, s.Delta)
		}
	}
	if d.Devices[0].ReservedB-d.Devices[0].ReservedA != wb-wa {
		t.Errorf("reserved grew %d, want %d", d.Devices[0].ReservedB-d.Devices[0].ReservedA, wb-wa)
	}
}

func TestDiffNewAndVanished(t *testing.T) {
	a, b := load(t, "v2_6_p5.pickle"), load(t, "empty_device_p4.pickle")
	d := Compare(b, a)
	statuses := map[string]int{}
	for _, s := range d.Sites {
		statuses[s.Status]++
		if s.Status == "new" && (s.BytesA != 0 || s.BlocksA != 0) {
			t.Errorf("new site %+v has bytes in A", s)
		}
	}
	d2 := Compare(a, b)
	if len(d2.Sites) != len(d.Sites) {
		t.Errorf("%d sites one way, %d the other", len(d.Sites), len(d2.Sites))
	}
	last := d2.Sites[len(d2.Sites)-1]
	if last.Delta > 0 {
		t.Errorf("the last site grew: %+v", last)
	}
}

func TestTraceQuery(t *testing.T) {
	s := load(t, "v2_6_p5.pickle")
	all := s.Trace(TraceQuery{Device: -1})
	n := 0
	for _, tr := range s.Traces {
		n += len(tr)
	}
	if len(all) != n {
		t.Fatalf("%d rows, want %d", len(all), n)
	}
	tests := []struct {
		name string
		q    TraceQuery
		keep func(TraceRow) bool
	}{
		{"device 1", TraceQuery{Device: 1}, func(r TraceRow) bool { return r.Device == 1 }},
		{"site", TraceQuery{Device: -1, Site: "model.py:63"}, func(r TraceRow) bool { return strings.Contains(r.Site, "model.py:63") }},
		{"size", TraceQuery{Device: -1, MinSize: 8 << 20}, func(r TraceRow) bool { return r.Size >= 8<<20 }},
		{"since", TraceQuery{Device: -1, SinceUS: 500}, func(r TraceRow) bool { return r.OffsetUS >= 500 }},
		{"action", TraceQuery{Device: -1, Action: "oom"}, func(r TraceRow) bool { return r.Action == "oom" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := 0
			for _, r := range all {
				if tt.keep(r) {
					want++
				}
			}
			got := s.Trace(tt.q)
			if len(got) != want || want == 0 || want == len(all) {
				t.Errorf("%d rows, want %d of %d (and a filter that filters)", len(got), want, len(all))
			}
			for _, r := range got {
				if !tt.keep(r) {
					t.Errorf("row %+v kept", r)
				}
			}
		})
	}
}

func TestSegmentRows(t *testing.T) {
	s := load(t, "v2_6_p5.pickle")
	rows := s.SegmentRows(-1)
	if len(rows) != len(s.Segments) {
		t.Fatalf("%d rows for %d segments", len(rows), len(s.Segments))
	}
	for i, r := range rows {
		var seg *Segment
		for _, sg := range s.Segments {
			if sg.Address == r.Address {
				seg = sg
			}
		}
		if seg == nil || r.Total != seg.TotalSize || r.Allocated != seg.AllocatedSize || r.Active != seg.ActiveSize {
			t.Errorf("row %d %+v disagrees with the segment's own totals %+v", i, r, seg)
		}
		if i > 0 && (rows[i-1].Device > r.Device || (rows[i-1].Device == r.Device && rows[i-1].Address > r.Address)) {
			t.Errorf("rows out of order at %d", i)
		}
	}
}

// TestAgreesWithMemoryViz: torch's own _memory_viz, reading the same files
// with pickle.load / json.load, counts the same segments and the same bytes
// in each block state, and memory()'s flamegraph the same bytes by stream
// and state (and, where blocks record history, the same requested bytes).
func TestAgreesWithMemoryViz(t *testing.T) {
	testbin.Need(t, testbin.Torch)
	var paths, exports []string
	dir := t.TempDir()
	for _, fx := range fixtures {
		p := filepath.Join("testdata", fx.file)
		paths = append(paths, p)
		exports = append(exports, exportJSON(t, p, dir))
	}
	args := append([]string{"-I", filepath.Join("testdata", "memviz.py")}, paths...)
	cmd := exec.Command(testbin.Python(), append(args, exports...)...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("memviz.py: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var viz map[string]struct {
		Stats  map[string]int64 `json:"stats"`
		Memory map[string]int64 `json:"memory"`
	}
	if err := json.Unmarshal(out, &viz); err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			s, err := ReadFile(p, DefaultLimits, nil)
			if err != nil {
				t.Fatal(err)
			}
			v := viz[p]
			// --export-json: memory_viz reads the JSON as it read the original
			if e := viz[exports[i]]; !reflect.DeepEqual(e, v) {
				t.Errorf("_memory_viz of the exported JSON %+v\nof the original %+v", e, v)
			}
			var reserved, allocated, pending, free, requested int64
			for _, d := range s.Summary(-1) {
				reserved += d.Reserved
				allocated += d.Allocated
				pending += d.PendingFree
				free += d.Free
				requested += d.Requested
			}
			want := map[string]int64{"segments": int64(len(s.Segments)), "total_size": reserved,
				"active_allocated": allocated, "active_pending_free": pending, "inactive": free}
			for k, w := range want {
				if v.Stats[k] != w {
					t.Errorf("_memory_viz stats %s = %d, vramguard %d", k, v.Stats[k], w)
				}
			}
			mem := map[string]int64{}
			var histReal int64
			for _, seg := range s.Segments {
				for _, b := range seg.Blocks {
					key := fmt.Sprintf("stream_%d;%s", seg.Stream, b.State)
					if len(b.History) == 0 {
						mem[key] += b.Size
						continue
					}
					var acc int64
					for _, h := range b.History {
						acc += h.RealSize
					}
					mem[key] += acc
					if b.Size != acc {
						mem[key+";gaps"] += b.Size - acc
					}
					if b.State == ActiveAllocated {
						histReal += acc
					}
				}
			}
			if !reflect.DeepEqual(mem, v.Memory) {
				t.Errorf("memory() by stream and state %v, vramguard %v", v.Memory, mem)
			}
			if s.Schema == Schema113 || s.Schema == Schema20 {
				if histReal != requested || requested == 0 {
					t.Errorf("requested %d, _memory_viz's allocated history %d", requested, histReal)
				}
			}
		})
	}
}

func exportJSON(t *testing.T, path, dir string) string {
	t.Helper()
	s, err := ReadFile(path, DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(path)+".export.json")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(f, s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExportRoundTrips: the exported JSON decodes to the same model.
func TestExportRoundTrips(t *testing.T) {
	dir := t.TempDir()
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			orig := load(t, fx.file)
			back, err := ReadFile(exportJSON(t, filepath.Join("testdata", fx.file), dir), DefaultLimits, nil)
			if err != nil {
				t.Fatal(err)
			}
			if back.Schema != orig.Schema {
				t.Errorf("schema %s, want %s", back.Schema, orig.Schema)
			}
			if !reflect.DeepEqual(back.Summary(-1), orig.Summary(-1)) || !reflect.DeepEqual(back.Sites(-1), orig.Sites(-1)) ||
				!reflect.DeepEqual(back.SegmentRows(-1), orig.SegmentRows(-1)) {
				t.Errorf("the export reads back differently")
			}
			a, b := back.Trace(TraceQuery{Device: -1}), orig.Trace(TraceQuery{Device: -1})
			for i := range a {
				a[i].Stack, b[i].Stack = nil, nil
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("trace reads back differently")
			}
		})
	}
}

// TestViewTimeline: the downsampled timeline keeps the trace's peak and
// ends at what the trace left live, per site, whatever the point count.
func TestViewTimeline(t *testing.T) {
	s := load(t, "fragmented_p4.pickle")
	tr := s.Traces[0]
	live := map[uint64]int64{}
	var cur, peak int64
	for _, e := range tr {
		switch e.Action {
		case ActionAlloc:
			live[e.Addr] = e.Size
			cur += e.Size
		case ActionFreeCompleted:
			cur -= live[e.Addr]
			delete(live, e.Addr)
		}
		peak = max(peak, cur)
	}
	for _, points := range []int{2, 7, 600} {
		v := s.View(ViewOptions{Device: 0, Points: points})
		tl := v.Timeline
		if len(tl.Total) > points || len(tl.Total) < 2 {
			t.Errorf("%d points: %d drawn", points, len(tl.Total))
		}
		var top int64
		for _, x := range tl.Total {
			top = max(top, x)
		}
		if top != peak {
			t.Errorf("%d points: peak %d, the trace's %d", points, top, peak)
		}
		for i := range tl.Total {
			var sum int64
			for _, series := range tl.Live {
				sum += series[i]
			}
			if sum != tl.Total[i] {
				t.Errorf("%d points: point %d's sites add to %d, total %d", points, i, sum, tl.Total[i])
			}
		}
		if tl.NEvents != len(tr) || tl.Events[len(tl.Events)-1] >= len(tr) {
			t.Errorf("events %d of %d", tl.NEvents, len(tr))
		}
	}
	v := s.View(ViewOptions{Device: 0, Points: 600})
	if len(v.Timeline.Total) != len(tr) {
		t.Errorf("%d points for %d events: a short trace is drawn whole", len(v.Timeline.Total), len(tr))
	}
	if got := v.Timeline.Total[len(tr)-1]; got != cur {
		t.Errorf("ends at %d live, the trace leaves %d", got, cur)
	}
	// the segment map: every block, at its offset, summing to the segment
	for _, seg := range v.Segments {
		var off int64
		for _, b := range seg.Blocks {
			if b.Offset != off {
				t.Errorf("segment %#x: block at %d, want %d", seg.Address, b.Offset, off)
			}
			off += b.Size
		}
		if off != seg.Total {
			t.Errorf("segment %#x: blocks add to %d of %d", seg.Address, off, seg.Total)
		}
	}
	// merged: fewer blocks than segments' blocks, the same bytes
	m := s.View(ViewOptions{Device: 0, Blocks: 3})
	if !m.Merged {
		t.Error("not merged at 3 blocks")
	}
	for i, seg := range m.Segments {
		var n int
		var sum int64
		for _, b := range seg.Blocks {
			n += b.Count
			sum += b.Size
		}
		if sum != v.Segments[i].Total || n != len(v.Segments[i].Blocks) {
			t.Errorf("merged segment %d: %d blocks, %d bytes; want %d, %d", i, n, sum, len(v.Segments[i].Blocks), v.Segments[i].Total)
		}
	}
}

// TestProgress: the progress callback hears the bytes read, rising, up to
// the file's size.
func TestProgress(t *testing.T) {
	// a valid snapshot of about 10 MiB: ten 1 MiB strings in
	// external_annotations
	chunk := strings.Repeat("x", 1<<20)
	var b strings.Builder
	b.WriteString("\x80\x02}(X\x08\x00\x00\x00segments]X\x14\x00\x00\x00external_annotations](")
	for range 10 {
		b.WriteString("X\x00\x00\x10\x00")
		b.WriteString(chunk)
	}
	b.WriteString("eu.")
	var seen []int64
	s, err := Decode(strings.NewReader(b.String()), DefaultLimits, func(n int64) { seen = append(seen, n) })
	if err != nil {
		t.Fatal(err)
	}
	if s.ExternalAnnotations != 10 {
		t.Errorf("%d annotations, want 10", s.ExternalAnnotations)
	}
	if len(seen) < 2 {
		t.Fatalf("progress heard %v", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] || seen[i] > int64(b.Len()) {
			t.Errorf("progress %v does not rise within the file's %d bytes", seen, b.Len())
		}
	}
}

// FuzzDecode: no input makes the decoder panic or run past its limits;
// whatever it accepts, the summary and the export handle.
func FuzzDecode(f *testing.F) {
	for _, fx := range fixtures {
		b, err := os.ReadFile(filepath.Join("testdata", fx.file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	lim := Limits{MaxString: 1 << 16, MaxMemo: 1 << 16, MaxStack: 1 << 16, MaxDepth: 64}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(strings.NewReader(string(b)), lim, nil)
		if err != nil {
			if !errors.Is(err, ErrNotSnapshot) {
				t.Fatalf("error %v does not wrap ErrNotSnapshot", err)
			}
			return
		}
		s.Summary(-1)
		s.Sites(-1)
		s.SegmentRows(-1)
		s.Trace(TraceQuery{Device: -1})
		for _, d := range s.Devices() {
			s.View(ViewOptions{Device: d})
		}
		var sb strings.Builder
		if err := WriteJSON(&sb, s); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNegativeSizesRefused: a negative size, in any record and either
// form, refuses the file with the record named; no figure is computed from
// it.
func TestNegativeSizesRefused(t *testing.T) {
	dir := t.TempDir()
	docs := map[string]string{
		"block": `{"segments": [{"device": 0, "address": 1, "total_size": 4, "blocks": [{"size": -9223372036854775808, "state": "inactive"}]}]}`,
		"total": `{"segments": [{"device": 0, "address": 1, "total_size": -1, "blocks": []}]}`,
		"oom":   `{"segments": [], "device_traces": [[{"action": "oom", "device_free": 0, "size": -5, "stream": 0}]]}`,
		"free":  `{"segments": [], "device_traces": [[{"action": "oom", "device_free": -1, "size": 5, "stream": 0}]]}`,
		"real":  `{"segments": [{"device": 0, "address": 1, "total_size": 4, "blocks": [{"size": 4, "state": "active_allocated", "history": [{"addr": 1, "real_size": -4}]}]}]}`,
		"req":   `{"segments": [{"device": 0, "address": 1, "total_size": 4, "blocks": [{"address": 1, "size": 4, "requested_size": -2, "state": "active_allocated"}]}]}`,
	}
	want := map[string]string{"block": "a block's size is -9223372036854775808", "total": "a segment's total_size is -1",
		"oom": "a trace entry's size is -5", "free": "an OOM entry's device_free is -1", "real": "an allocation's real_size is -4",
		"req": "a block's requested_size is -2"}
	var script strings.Builder
	script.WriteString("import json, pickle, sys\n")
	for name, doc := range docs {
		js := filepath.Join(dir, name+".json")
		if err := os.WriteFile(js, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "pickle.dump(json.load(open(%q)), open(%q, 'wb'), protocol=2)\n", js, filepath.Join(dir, name+".pickle"))
	}
	if out, err := exec.Command(testbin.Python(), "-I", "-c", script.String()).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for name, w := range want {
		for _, ext := range []string{".json", ".pickle"} {
			_, err := ReadFile(filepath.Join(dir, name+ext), DefaultLimits, nil)
			if err == nil || !errors.Is(err, ErrNotSnapshot) || !strings.Contains(err.Error(), w+": sizes are never negative") {
				t.Errorf("%s%s: %v, want %q", name, ext, err, w)
			}
		}
	}
}

// TestSumsSaturate: sizes that add past the largest int64 stop there, and
// the summary says so, rather than wrapping negative.
func TestSumsSaturate(t *testing.T) {
	const big = 6917529027641081856 // 6 EiB
	doc := fmt.Sprintf(`{"segments": [{"device": 0, "address": 1, "total_size": %d, "blocks": [{"size": %d, "state": "active_allocated"}]},
		{"device": 0, "address": 9, "total_size": %d, "blocks": [{"size": %d, "state": "inactive"}, {"size": %d, "state": "active_allocated"}]}]}`,
		big, big, big, big, big)
	s, err := Decode(strings.NewReader(doc), DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := s.Summary(0)[0]
	if d.Reserved != math.MaxInt64 || d.Allocated != math.MaxInt64 || d.Free != big || !d.Saturated {
		t.Errorf("reserved %d, allocated %d, free %d, saturated %v", d.Reserved, d.Allocated, d.Free, d.Saturated)
	}
	if st := s.Sites(0); len(st) != 1 || st[0].Bytes != math.MaxInt64 {
		t.Errorf("sites %+v", st)
	}
	if r := s.SegmentRows(0); r[1].Total != math.MaxInt64 {
		t.Errorf("segment %+v", r[1])
	}
}

// TestViewBounded: the view of a segment whose 200 000 blocks alternate
// live and free, and of 100 000 segments, stays about 1 MB of JSON, and
// every segment drawn still adds up: its blocks' bytes, count, and live
// and free bytes.
func TestViewBounded(t *testing.T) {
	alternating := &Snapshot{Schema: Schema23, Traces: [][]*TraceEntry{nil}}
	seg := &Segment{Address: 1 << 40, Large: true}
	for i := range 200_000 {
		b := Block{Address: seg.Address + uint64(i)<<20, Size: 1 << 20, State: Inactive}
		if i%2 == 0 {
			b.State = ActiveAllocated
		}
		seg.Blocks = append(seg.Blocks, b)
		seg.TotalSize += b.Size
	}
	alternating.Segments = []*Segment{seg}
	many := &Snapshot{Schema: Schema23}
	for i := range 100_000 {
		st := ActiveAllocated
		if i%3 == 0 {
			st = Inactive
		}
		many.Segments = append(many.Segments, &Segment{Address: uint64(i+1) << 30, TotalSize: 2 << 20, Large: true,
			Blocks: []Block{{Address: uint64(i+1) << 30, Size: 2 << 20, State: st}}})
	}
	for name, s := range map[string]*Snapshot{"alternating": alternating, "many segments": many} {
		t.Run(name, func(t *testing.T) {
			v := s.View(DefaultView)
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d bytes", len(b))
			if len(b) > 1_100_000 {
				t.Errorf("the view is %d bytes", len(b))
			}
			if name == "alternating" && !v.Merged {
				t.Error("not merged")
			}
			nblocks := 0
			bySeg := map[uint64]*Segment{}
			for _, seg := range s.Segments {
				bySeg[seg.Address] = seg
			}
			for _, vs := range v.Segments {
				seg := bySeg[vs.Address]
				var size, live, free int64
				count := 0
				for _, vb := range vs.Blocks {
					nblocks++
					size += vb.Size
					count += max(vb.Count, 1)
					switch vb.State {
					case "mixed":
						live += vb.Live
						free += vb.Free
						if vb.Live+vb.Pending+vb.Free != vb.Size {
							t.Errorf("a mixed block of %d bytes gives %d+%d+%d", vb.Size, vb.Live, vb.Pending, vb.Free)
						}
					case "active_allocated":
						live += vb.Size
					case "inactive":
						free += vb.Size
					}
				}
				var wantLive int64
				for _, b := range seg.Blocks {
					if b.State == ActiveAllocated {
						wantLive += b.Size
					}
				}
				if size != seg.TotalSize || count != len(seg.Blocks) || live != wantLive || live+free != size {
					t.Errorf("segment %#x: %d bytes in %d blocks, %d live; want %d in %d, %d live", vs.Address, size, count, live,
						seg.TotalSize, len(seg.Blocks), wantLive)
				}
			}
			if nblocks > DefaultView.Blocks+DefaultView.Segments || len(v.Segments)+v.SegmentsOmitted != len(s.Segments) {
				t.Errorf("%d blocks in %d segments drawn, %d omitted", nblocks, len(v.Segments), v.SegmentsOmitted)
			}
		})
	}
}
