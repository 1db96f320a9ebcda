package snapshot

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
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
	Index             int   `json:"index"`
	Size              int64 `json:"size"`
	DeviceFree        int64 `json:"device_free"`
	Stream            int64 `json:"stream"`
	Reserved          int64 `json:"reserved"`
	Allocated         int64 `json:"allocated"`
	PendingFree       int64 `json:"pending_free"`
	CachedFree        int64 `json:"cached_free"`
	LargestFree       int64 `json:"largest_free"`
	LargestUsableFree int64 `json:"largest_usable_free"`
	Streams           int   `json:"streams"`
	PrivatePools      int   `json:"private_pools"`
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
