package snapshot

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// The real snapshots of ../shared/corpora/snapshots (SOURCES.md section 1):
// files torch wrote for other people's programs, read as a user's would be.

// corpusSnapshots lists every snapshot of the corpus.
func corpusSnapshots(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(testbin.Corpora(t), "snapshots")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) < 22 {
		t.Fatalf("%d snapshots in %s, want the corpus's 22", len(out), dir)
	}
	return out
}

// refFigures is what testdata/refsnap.py (a pickle.Unpickler that refuses
// every class) computes of one device of a snapshot.
type refFigures struct {
	Reserved     int64   `json:"reserved"`
	Allocated    int64   `json:"allocated"`
	Active       int64   `json:"active"`
	Requested    int64   `json:"requested"`
	Segments     int     `json:"segments"`
	Blocks       int     `json:"blocks"`
	TraceEntries int     `json:"trace_entries"`
	OOM          *refOOM `json:"oom"`
	// Sites are the live bytes and blocks by allocation site.
	Sites map[string][2]int64 `json:"sites"`
}

// refOOM is the reference's replay of a device's allocator back to its
// last OOM entry.
type refOOM struct {
	Index             int    `json:"index"`
	Site              string `json:"site"`
	Size              int64  `json:"size"`
	DeviceFree        int64  `json:"device_free"`
	Stream            int64  `json:"stream"`
	Reserved          int64  `json:"reserved"`
	Allocated         int64  `json:"allocated"`
	PendingFree       int64  `json:"pending_free"`
	CachedFree        int64  `json:"cached_free"`
	LargestFree       int64  `json:"largest_free"`
	LargestUsableFree int64  `json:"largest_usable_free"`
	Streams           int    `json:"streams"`
	PrivatePools      int    `json:"private_pools"`
}

// refsnap runs testdata/refsnap.py MODE PATHS... and decodes its JSON.
func refsnap(t *testing.T, v any, mode string, paths ...string) {
	t.Helper()
	args := append([]string{"-I", filepath.Join("testdata", "refsnap.py"), mode}, paths...)
	out, err := exec.Command(testbin.Python(), args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("refsnap.py %s: %v\n%s", mode, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("refsnap.py %s: %v", mode, err)
	}
}

var (
	corpusRefOnce sync.Once
	corpusRef     map[string]map[string]refFigures
)

// corpusFigures is the reference's figures of every corpus snapshot, by
// path then device, computed once per test process.
func corpusFigures(t *testing.T) map[string]map[string]refFigures {
	t.Helper()
	paths := corpusSnapshots(t)
	corpusRefOnce.Do(func() { refsnap(t, &corpusRef, "figures", paths...) })
	if corpusRef == nil {
		t.Fatal("refsnap.py figures failed")
	}
	return corpusRef
}

// TestCorpusFigures: every real snapshot's per-device figures and
// allocation sites equal the reference reader's. The sites are charged to
// the innermost frame outside torch on either kind of path (one snapshot
// was recorded on Windows).
func TestCorpusFigures(t *testing.T) {
	ref := corpusFigures(t)
	for _, p := range corpusSnapshots(t) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			s, err := ReadFile(p, DefaultLimits, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := ref[p]
			// every integer torch wrote fits 64 bits (a C++ frame's line
			// (size_t)-1 too): none is clamped, nor said to be
			if s.Saturated != 0 {
				t.Errorf("%d integers read as over 64 bits", s.Saturated)
			}
			if len(s.Devices()) != len(want) {
				t.Errorf("%d devices, the reference %d", len(s.Devices()), len(want))
			}
			for _, d := range s.Summary(-1) {
				w, ok := want[strconv.Itoa(d.Device)]
				if !ok {
					t.Errorf("device %d: not in the reference", d.Device)
					continue
				}
				ntrace := 0
				if d.Device < len(s.Traces) {
					ntrace = len(s.Traces[d.Device])
				}
				got := refFigures{Reserved: d.Reserved, Allocated: d.Allocated, Active: d.Active, Requested: d.Requested,
					Segments: d.Segments, Blocks: d.Blocks, TraceEntries: ntrace}
				sites := map[string][2]int64{}
				for _, st := range s.Sites(d.Device) {
					sites[st.Site] = [2]int64{st.Bytes, int64(st.Blocks)}
				}
				if !reflect.DeepEqual(sites, w.Sites) && (len(sites) > 0 || len(w.Sites) > 0) {
					t.Errorf("device %d: sites\n%v\nreference\n%v", d.Device, sites, w.Sites)
				}
				w.OOM, w.Sites = nil, nil
				if !reflect.DeepEqual(got, w) {
					t.Errorf("device %d: vramguard %+v\nreference %+v", d.Device, got, w)
				}
			}
		})
	}
}

// corpusFile is one named corpus snapshot.
func corpusFile(t *testing.T, name string) string {
	t.Helper()
	return testbin.CorpusFile(t, "snapshots/"+name)
}

func loadCorpus(t *testing.T, name string) *Snapshot {
	t.Helper()
	s, err := ReadFile(corpusFile(t, name), DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (o *OOMState) ref(index int, e *TraceEntry) refOOM {
	return refOOM{Index: index, Site: SiteName(SiteOf(e.Stack)), Size: e.Size, DeviceFree: e.DeviceFree, Stream: e.Stream, Reserved: o.Reserved,
		Allocated: o.Allocated, PendingFree: o.PendingFree, CachedFree: o.CachedFree, LargestFree: o.LargestFree,
		LargestUsableFree: o.LargestUsable, Streams: o.Streams, PrivatePools: o.PrivatePools}
}

// eachCorpusOOM calls f with each corpus snapshot's path that holds an
// OOM, the device it happened on, the reference's figures of that device
// (their OOM set) and the snapshot as read; the test fails when the corpus
// holds no OOM.
func eachCorpusOOM(t *testing.T, f func(path string, device int, want refFigures, s *Snapshot)) {
	t.Helper()
	ref := corpusFigures(t)
	n := 0
	for _, p := range corpusSnapshots(t) {
		for dev, w := range ref[p] {
			if w.OOM == nil {
				continue
			}
			n++
			s, err := ReadFile(p, DefaultLimits, nil)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := strconv.Atoi(dev)
			f(p, d, w, s)
		}
	}
	if n == 0 {
		t.Fatal("no OOM in the corpus")
	}
}

// TestCorpusOOMJudgedAtTheOOM: the OOM is judged from the allocator's state
// at the OOM entry (the dump's with every later event undone), equal to the
// reference reader's replay. The real OOM (constructor-sun, device 1):
// 4.9 GiB asked, 133 MiB cached free and 91 MiB free on the device, one
// stream, no private pool; the 25.6 GiB free block of the dump was freed by
// frees after the OOM.
func TestCorpusOOMJudgedAtTheOOM(t *testing.T) {
	eachCorpusOOM(t, func(p string, d int, w refFigures, s *Snapshot) {
		sum := s.Summary(d)[0]
		if sum.OOM == nil || sum.OOM.At == nil {
			t.Fatalf("%s device %d: no OOM account", filepath.Base(p), d)
		}
		if got := sum.OOM.At.ref(sum.OOM.At.Index, s.Traces[d][sum.OOM.At.Index]); got != *w.OOM {
			t.Errorf("%s device %d: at the OOM\nvramguard %+v\nreference %+v", filepath.Base(p), d, got, *w.OOM)
		}
	})
	s := loadCorpus(t, "constructor-sun__memory_snapshot_oom_expandable.pickle")
	o := s.Summary(1)[0].OOM
	if o == nil {
		t.Fatal("device 1: no OOM")
	}
	if !strings.HasPrefix(o.Reason, "memory in use: ") || strings.Contains(o.Reason, "could have held it") {
		t.Errorf("reason %q, want memory in use", o.Reason)
	}
	for _, want := range []string{"133 MiB free in the cache", "91.3 MiB free on the device", "4.9 GiB asked for"} {
		if !strings.Contains(o.Reason, want) {
			t.Errorf("reason %q does not say %q", o.Reason, want)
		}
	}
	if dump := s.Summary(1)[0].LargestFreeLarge; dump <= o.Size || o.At.LargestFree >= o.Size {
		t.Errorf("the dump's largest free block %d and the OOM's %d: the corpus no longer shows a block freed after the OOM", dump, o.At.LargestFree)
	}
}

// TestCorpusReplay: the replay back to any entry of a trace (segments
// allocated, freed, mapped and unmapped after it; ten streams) equals the
// reference reader's.
func TestCorpusReplay(t *testing.T) {
	for _, c := range []struct {
		file string
		dev  int
	}{
		{"maphsge4__snapshot_10_streams.pickle", 0},
		{"mercuryb1__cuda_memory_snapshot.pickle", 0},
		{"constructor-sun__memory_snapshot_oom_expandable.pickle", 1},
		{"constructor-sun__memory_snapshot_oom_expandable.pickle", 0},
		{"cranberrii__memory_snapshot_no_settings.pickle", 0},
		{"jaspersolt__snapshot_with_snapshot_actions.pickle", 0},
	} {
		t.Run(c.file, func(t *testing.T) {
			p := corpusFile(t, c.file)
			s := loadCorpus(t, c.file)
			tr := s.Traces[c.dev]
			args := []string{p, strconv.Itoa(c.dev)}
			var idx []int
			for i := 0; i < 16; i++ {
				idx = append(idx, i*(len(tr)-1)/15)
				args = append(args, strconv.Itoa(idx[i]))
			}
			var want []refOOM
			refsnap(t, &want, "at", args...)
			for k, i := range idx {
				got := s.stateAt(c.dev, i).ref(i, tr[i])
				if got != want[k] {
					t.Errorf("before entry %d (%s):\nvramguard %+v\nreference %+v", i, tr[i].Action, got, want[k])
				}
			}
		})
	}
}

// TestCorpusOOMSite: the sites table marks the allocation that ran out of
// memory, first, on its device and on all, though its site holds no live
// bytes on that device.
func TestCorpusOOMSite(t *testing.T) {
	eachCorpusOOM(t, func(p string, d int, w refFigures, s *Snapshot) {
		for _, which := range []int{d, -1} {
			tab := s.SiteTable(which)
			if len(tab) == 0 || tab[0].Site != w.OOM.Site || tab[0].OOMBytes != w.OOM.Size {
				t.Errorf("%s --device %d: sites start %+v, want the OOM's %s asking %d", filepath.Base(p), which, tab[:min(1, len(tab))], w.OOM.Site, w.OOM.Size)
			}
			marked := 0
			for _, st := range tab {
				if st.OOMBytes > 0 {
					marked++
				}
			}
			if marked != 1 {
				t.Errorf("%s --device %d: %d sites marked", filepath.Base(p), which, marked)
			}
		}
		// the rest is Sites as it was
		if tab, sites := s.SiteTable(d), s.Sites(d); len(tab) != len(sites)+1 && len(tab) != len(sites) {
			t.Errorf("%d rows, %d sites", len(tab), len(sites))
		}
	})
}

// TestCorpusExportRoundTrips: --export-json of every real snapshot (every
// schema and form the corpus holds: torch 2.0's block histories,
// memory_snapshot()'s bare list, 2.1 to 2.9+, Windows paths, a real OOM)
// and of every fixture gives, field for field, what the reference reader
// gives of the original, and reads back as the same snapshot. Snapshots
// whose stacks written out take more than 8 MiB are exported in the
// compact form (which the reference resolves), the others in torch's.
func TestCorpusExportRoundTrips(t *testing.T) {
	dir := t.TempDir()
	paths := corpusSnapshots(t)
	for _, fx := range fixtures {
		paths = append(paths, filepath.Join("testdata", fx.file))
	}
	var args []string
	origs := map[string]*Snapshot{}
	compact := map[string]bool{}
	for _, p := range paths {
		s, err := ReadFile(p, DefaultLimits, nil)
		if err != nil {
			t.Fatal(err)
		}
		origs[p] = s
		compact[p] = planCompact(s).inline > 8<<20
		out := filepath.Join(dir, filepath.Base(p)+".export.json")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(f, s, compact[p]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		args = append(args, p, out)
	}
	var diffs map[string][]string
	refsnap(t, &diffs, "same", args...)
	forms := map[bool]int{}
	for i, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			orig := origs[p]
			forms[compact[p]]++
			d, ok := diffs[p]
			if !ok {
				t.Fatal("not compared")
			}
			// integers over 64 bits are clamped, and said to be
			clamped := 0
			for _, l := range d {
				if strings.HasSuffix(l, "exported 9223372036854775807") || strings.HasSuffix(l, "exported -9223372036854775808") {
					clamped++
				}
			}
			if len(d) > 0 && (clamped != len(d) || clamped != orig.Saturated) {
				t.Errorf("the export differs from the original:\n%s", strings.Join(d, "\n"))
			}
			back, err := ReadFile(args[2*i+1], DefaultLimits, nil)
			if err != nil {
				t.Fatal(err)
			}
			sameSnapshot(t, orig, back)
		})
	}
	if forms[true] == 0 || forms[false] == 0 {
		t.Errorf("forms exported %v: want both", forms)
	}
}

// sameSnapshot fails t unless b reads as a does: schema, summary, sites,
// segments, trace, stacks.
func sameSnapshot(t *testing.T, a, b *Snapshot) {
	t.Helper()
	if a.Schema != b.Schema {
		t.Errorf("schema %s, read back %s", a.Schema, b.Schema)
	}
	if !reflect.DeepEqual(a.Summary(-1), b.Summary(-1)) {
		t.Errorf("summary\n%+v\nread back\n%+v", a.Summary(-1), b.Summary(-1))
	}
	if !reflect.DeepEqual(a.Sites(-1), b.Sites(-1)) || !reflect.DeepEqual(a.SegmentRows(-1), b.SegmentRows(-1)) {
		t.Errorf("sites or segments read back differently")
	}
	ta, tb := a.Trace(TraceQuery{Device: -1}), b.Trace(TraceQuery{Device: -1})
	if len(ta) != len(tb) {
		t.Fatalf("%d trace events, read back %d", len(ta), len(tb))
	}
	for i := range ta {
		fa, fb := stackText(ta[i].Stack), stackText(tb[i].Stack)
		ta[i].Stack, tb[i].Stack = nil, nil
		if ta[i] != tb[i] || fa != fb {
			t.Fatalf("trace event %d: %+v %s\nread back %+v %s", i, ta[i], fa, tb[i], fb)
		}
	}
}

func stackText(st *Stack) string {
	if st == nil {
		return "nil"
	}
	var sb strings.Builder
	for _, f := range st.Frames() {
		sb.WriteString(SiteName(f) + "\n")
	}
	return sb.String()
}

// TestMemoryVizPage: memory_viz's own page (the pickle embedded in base64,
// as torch's _format_viz writes it) of real snapshots reads as the
// snapshot itself, with the reference's figures; another HTML page is
// named for what it is.
func TestMemoryVizPage(t *testing.T) {
	dir := t.TempDir()
	ref := corpusFigures(t)
	for _, name := range []string{"constructor-sun__memory_snapshot_oom_expandable.pickle", "yiyi__1.3b_snapshot.pickle",
		"muduard__memory_snapshot_list.pkl"} {
		t.Run(name, func(t *testing.T) {
			p := corpusFile(t, name)
			page := filepath.Join(dir, name+".html")
			var none any
			refsnap(t, &none, "viz", p, page)
			var figs map[string]map[string]refFigures
			refsnap(t, &figs, "figures", page)
			if !reflect.DeepEqual(figs[page], ref[p]) {
				t.Errorf("the reference reads the page as\n%v\nand the pickle as\n%v", figs[page], ref[p])
			}
			s, err := ReadFile(page, DefaultLimits, nil)
			if err != nil {
				t.Fatal(err)
			}
			sameSnapshot(t, loadCorpus(t, name), s)
		})
	}
	other := filepath.Join(dir, "other.html")
	os.WriteFile(other, []byte("\n<!DOCTYPE html>\n<html><body><script>const alloc_data = [1, 2]</script></body></html>\n"), 0o644)
	_, err := ReadFile(other, DefaultLimits, nil)
	if err == nil || !errors.Is(err, ErrNotSnapshot) || !strings.Contains(err.Error(), "an HTML page with no snapshot embedded") {
		t.Errorf("another page: %v", err)
	}
}

// TestExportBounded: a deep stack shared by many trace entries (torch's
// JSON form of it would be hundreds of times the pickle) is exported in the
// compact form, a few times the pickle at most (JSON repeats each record's
// keys), which reads back as the
// same snapshot and resolves to the original field for field.
func TestExportBounded(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "shared.pickle")
	script := `import pickle, sys
frames = [{"name": "f%d" % i, "filename": "/home/user/deep/module_%d.py" % i, "line": i} for i in range(400)]
trace = [{"action": "alloc", "addr": 1 << 30 | i << 10, "size": 1024, "stream": 0, "time_us": i, "frames": frames} for i in range(10000)]
snap = {"segments": [], "device_traces": [trace], "allocator_settings": {"expandable_segments": False}}
with open(sys.argv[1], "wb") as f:
    pickle.dump(snap, f, protocol=4)
`
	if out, err := exec.Command(testbin.Python(), "-I", "-c", script, p).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s, err := ReadFile(p, DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Compact() {
		t.Fatal("torch's form chosen")
	}
	out := filepath.Join(dir, "shared.json")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(f, s); err != nil {
		t.Fatal(err)
	}
	f.Close()
	in, _ := os.Stat(p)
	ex, _ := os.Stat(out)
	t.Logf("pickle %d bytes, export %d (torch's form: about %d)", in.Size(), ex.Size(), planCompact(s).inline)
	// JSON repeats each record's keys, which the pickle memoises
	if ex.Size() > 5*in.Size() {
		t.Errorf("the export is %d bytes, %.0f times the pickle's %d", ex.Size(), float64(ex.Size())/float64(in.Size()), in.Size())
	}
	back, err := ReadFile(out, DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, s, back)
	if back.Stacks != 1 || s.Stacks != 1 {
		t.Errorf("%d stacks, read back %d", s.Stacks, back.Stacks)
	}
	var diffs map[string][]string
	refsnap(t, &diffs, "same", p, out)
	if d := diffs[p]; len(d) > 0 {
		t.Errorf("the export differs from the original:\n%s", strings.Join(d, "\n"))
	}
}
