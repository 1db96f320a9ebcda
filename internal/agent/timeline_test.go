package agent

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// openStore is a new database in a directory of its own, closed when t
// ends.
func openStore(t testing.TB) *store.Store {
	t.Helper()
	return testbin.OpenStore(t, t.TempDir())
}

func TestBlockRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	big := make([]Point, 60)
	for i := range big {
		big[i] = Point{T: 1_700_000_000_000 + int64(i)*1000 + r.Int64N(30), GPU: r.Int64N(80 << 30), RSS: r.Int64N(8 << 30), Alloc: -1, Reserved: r.Int64N(80 << 30)}
	}
	tests := []struct {
		name string
		ps   []Point
	}{
		{"one point", []Point{{T: 5, GPU: 1, RSS: 2, Alloc: -1, Reserved: -1}}},
		{"falling and absent values", []Point{{T: 1000, GPU: 9 << 30, RSS: 1, Alloc: 3, Reserved: 4}, {T: 2000, GPU: 0, RSS: 0, Alloc: -1, Reserved: -1}}},
		{"a minute of noise", big},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := encodeBlock(7, ResFine, tc.ps)
			if b.N != len(tc.ps) || b.T0.UnixMilli() != tc.ps[0].T || b.T1.UnixMilli() != tc.ps[len(tc.ps)-1].T {
				t.Fatalf("block header %+v", b)
			}
			got, err := decodeBlock(b.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.ps) {
				t.Fatalf("round trip:\n got %v\nwant %v", got, tc.ps)
			}
		})
	}
	if _, err := decodeBlock([]byte("not a block at all")); err == nil {
		t.Fatal("garbage decoded")
	}
}

func TestTimelinesResolutionsAndRetention(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	tl := NewTimelines(st, Retention{Fine: time.Hour, Coarse: 3 * time.Hour, CoarseStep: time.Minute})
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	// Two hours of 1 Hz samples: memory climbs 1 MiB a second, with a
	// one-second spike of +1 GiB at 10:30:30 that only the peak keeps.
	spike := t0.Add(30*time.Minute + 30*time.Second)
	var last Point
	for s := 0; s < 7200; s++ {
		ts := t0.Add(time.Duration(s) * time.Second)
		p := Point{T: ts.UnixMilli(), GPU: int64(s) << 20, RSS: 100, Alloc: -1, Reserved: -1}
		if ts.Equal(spike) {
			p.GPU += 1 << 30
		}
		tl.Add(1, p)
		last = p
		if s%60 == 0 {
			if err := tl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Fine: the last ten minutes, every sample, the newest from memory.
	end := t0.Add(7199 * time.Second)
	pts, res, err := tl.Query(ctx, 1, end.Add(-10*time.Minute), end, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res != ResFine || len(pts) != 601 || !reflect.DeepEqual(pts[len(pts)-1], last) {
		t.Fatalf("fine query: res %d, %d points, last %v (want 601 ending %v)", res, len(pts), pts[len(pts)-1], last)
	}
	// Coarse: a range longer than fineView uses the per-minute peaks.
	pts, res, err = tl.Query(ctx, 1, end.Add(-7*time.Hour), end, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res != ResCoarse || len(pts) != 120 {
		t.Fatalf("coarse query: res %d, %d points, want 120", res, len(pts))
	}
	if got, want := pts[30].GPU, int64(1830)<<20+1<<30; got != want {
		t.Fatalf("10:30 peak = %d, want the spike %d", got, want)
	}
	// Downsampling keeps each bucket's peak.
	ds, _, _ := tl.Query(ctx, 1, end.Add(-7*time.Hour), end, 12)
	if len(ds) != 12 || ds[3].GPU != int64(1830)<<20+1<<30 {
		t.Fatalf("downsampled: %d points, bucket 3 = %d", len(ds), ds[3].GPU)
	}

	// Retention at 12:00 + 1h: fine blocks older than 1h go, coarse stay.
	if err := tl.Prune(ctx, end.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	fine, _ := st.AgentBlocks(ctx, 1, ResFine, t0, end)
	coarse, _ := st.AgentBlocks(ctx, 1, ResCoarse, t0, end)
	if len(fine) != 0 || len(coarse) != 1 {
		// Coarse block 11:00-12:00 is still buffered (not complete), so one
		// stored: 10:00-11:00.
		t.Fatalf("after prune: %d fine blocks (want 0), %d coarse (want 1)", len(fine), len(coarse))
	}
	if err := tl.Prune(ctx, end.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	coarse, _ = st.AgentBlocks(ctx, 1, ResCoarse, t0, end)
	if len(coarse) != 0 {
		t.Fatalf("coarse blocks past retention kept: %d", len(coarse))
	}
}

func TestTimelinesMaxBytes(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	tl := NewTimelines(st, Retention{Fine: 48 * time.Hour, MaxBytes: 64 << 10})
	t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(3, 4))
	for s := 0; s < 6*3600; s++ {
		tl.Add(1, Point{T: t0.Add(time.Duration(s) * time.Second).UnixMilli(), GPU: r.Int64N(1 << 40), RSS: 1, Alloc: -1, Reserved: -1})
	}
	if err := tl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before, _ := tl.payload(ctx)
	if before <= 64<<10 {
		t.Fatalf("test needs more data than the bound: %d bytes", before)
	}
	if err := tl.Prune(ctx, t0.Add(6*time.Hour)); err != nil {
		t.Fatal(err)
	}
	after, _ := tl.payload(ctx)
	if after > 64<<10 {
		t.Fatalf("payload %d after prune, bound %d", after, 64<<10)
	}
	// The newest data survives, the oldest went.
	pts, _, _ := tl.Query(ctx, 1, t0.Add(5*time.Hour+59*time.Minute), t0.Add(6*time.Hour), 0)
	if len(pts) == 0 {
		t.Fatal("newest samples pruned")
	}
	pts, _, _ = tl.Query(ctx, 1, t0, t0.Add(time.Minute), 0)
	if len(pts) != 0 {
		t.Fatal("oldest samples kept")
	}
}
