package agent

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

// oldBlock encodes ps as a block of an earlier version was written:
// version 1 four changes a point, version 2 five (with utilisation), both
// without per-GPU readings.
func oldBlock(version byte, ps []Point) []byte {
	raw := []byte{version}
	raw = binary.AppendUvarint(raw, uint64(len(ps)))
	prev := Point{T: ps[0].T}
	for _, p := range ps {
		raw = binary.AppendUvarint(raw, uint64(p.T-prev.T))
		raw = binary.AppendVarint(raw, p.GPU-prev.GPU)
		raw = binary.AppendVarint(raw, p.RSS-prev.RSS)
		raw = binary.AppendVarint(raw, p.Alloc-prev.Alloc)
		raw = binary.AppendVarint(raw, p.Reserved-prev.Reserved)
		if version >= 2 {
			raw = binary.AppendVarint(raw, p.Util-prev.Util)
		}
		prev = p
	}
	var buf bytes.Buffer
	binary.Write(&buf, binary.BigEndian, ps[0].T)
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(raw)
	w.Close()
	return buf.Bytes()
}

// TestBlockVersions: a block keeps each point's utilisation and its
// per-GPU readings (one GPU holding the job's total, written short, or
// not; GPUs coming and going);
// blocks written before (version 2: no per-GPU readings, version 1: no
// utilisation either) still read, what they lack unknown (GPUs nil,
// utilisation -1).
func TestBlockVersions(t *testing.T) {
	dp := func(i int, gib, util int64) timeline.DevicePoint {
		return timeline.DevicePoint{Index: i, Bytes: gib << 30, Util: util}
	}
	ps := []Point{
		{T: 1000, GPU: 5 << 30, RSS: 1 << 30, Alloc: -1, Reserved: -1, Util: 80, GPUs: []timeline.DevicePoint{dp(0, 5, 80)}},
		{T: 2000, GPU: 8 << 30, RSS: 1 << 30, Alloc: -1, Reserved: -1, Util: 0, GPUs: []timeline.DevicePoint{dp(0, 5, 0), dp(3, 3, -1)}},
		{T: 3000, GPU: 3 << 30, RSS: 1 << 30, Alloc: 2 << 30, Reserved: 3 << 30, Util: -1, GPUs: []timeline.DevicePoint{dp(3, 3, -1)}},
		{T: 4000, GPU: 0, RSS: 1 << 30, Alloc: -1, Reserved: -1, Util: -1},
		// one GPU whose reading is not the job's total (written in full)
		{T: 4500, GPU: 6 << 30, RSS: 1 << 30, Alloc: -1, Reserved: -1, Util: 20, GPUs: []timeline.DevicePoint{dp(2, 5, 20)}},
		{T: 5000, GPU: 9 << 30, RSS: 1 << 30, Alloc: -1, Reserved: -1, Util: 100, GPUs: []timeline.DevicePoint{dp(1, 4, 100), dp(3, 5, 7)}},
	}
	without := func(util bool) []Point {
		out := make([]Point, len(ps))
		for i, p := range ps {
			p.GPUs = nil
			if !util {
				p.Util = -1
			}
			out[i] = p
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
		want []Point
	}{
		{"version 3 (written now)", encodeBlock(1, ResFine, ps).Data, ps},
		{"version 2", oldBlock(2, ps), without(true)},
		{"version 1", oldBlock(1, ps), without(false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeBlock(tt.data)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("read back: %+v %v\nwant %+v", got, err, tt.want)
			}
		})
	}
	if _, err := decodeBlock(oldBlock(9, ps)); err == nil {
		t.Errorf("a block of version 9 read")
	}
}

// TestPeakGPUs: a coarse step's (and a downsampled bucket's) per-GPU
// reading is each GPU's peak, a GPU one point lacks as the other has it,
// and neither point's readings are written.
func TestPeakGPUs(t *testing.T) {
	dp := func(i int, b, u int64) timeline.DevicePoint { return timeline.DevicePoint{Index: i, Bytes: b, Util: u} }
	type dps = []timeline.DevicePoint
	tests := []struct {
		name    string
		a, p    dps
		want    dps
		reusesA bool
	}{
		{"none", nil, nil, nil, true},
		{"a has the peak", dps{dp(0, 5, 80)}, dps{dp(0, 4, 10)}, dps{dp(0, 5, 80)}, true},
		{"p higher", dps{dp(0, 5, 10)}, dps{dp(0, 6, 10)}, dps{dp(0, 6, 10)}, false},
		{"memory from one, utilisation from the other", dps{dp(0, 5, 10)}, dps{dp(0, 4, 90)}, dps{dp(0, 5, 90)}, false},
		{"GPUs come and go", dps{dp(0, 5, -1), dp(2, 1, 3)}, dps{dp(1, 7, 50), dp(2, 2, 1)}, dps{dp(0, 5, -1), dp(1, 7, 50), dp(2, 2, 3)}, false},
		{"only p", nil, dps{dp(3, 1, 1)}, dps{dp(3, 1, 1)}, false},
		{"only a", dps{dp(3, 1, 1)}, nil, dps{dp(3, 1, 1)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, p := slices.Clone(tt.a), slices.Clone(tt.p)
			got := peakGPUs(a, p)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("peak %+v, want %+v", got, tt.want)
			}
			if !reflect.DeepEqual(a, tt.a) || !reflect.DeepEqual(p, tt.p) {
				t.Errorf("the points' readings were written: %+v %+v", a, p)
			}
			if same := len(got) > 0 && len(a) > 0 && &got[0] == &a[0]; same != (tt.reusesA && len(a) > 0) {
				t.Errorf("reuses a's readings: %v, want %v", same, tt.reusesA)
			}
		})
	}
}

// TestCoarsePeaksPerGPU: the coarse tier keeps each step's peak on each
// GPU, as this test computes it from the samples it adds (a job on GPUs 0
// and 1 whose memory on each moves apart, GPU 1 gone for a while), stored
// and read back.
func TestCoarsePeaksPerGPU(t *testing.T) {
	ctx := context.Background()
	tl := NewTimelines(openStore(t), Retention{Fine: time.Hour, Coarse: 3 * time.Hour, CoarseStep: time.Minute})
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	type peakOf struct{ bytes, util int64 }
	want := map[int64]map[int]peakOf{} // by step start, by GPU
	for s := range int64(300) {
		p := Point{T: t0 + s*1000, Alloc: -1, Reserved: -1, Util: -1}
		for _, g := range []int{0, 1} {
			if g == 1 && s >= 100 && s < 170 {
				continue
			}
			d := timeline.DevicePoint{Index: g, Bytes: r.Int64N(40 << 30), Util: r.Int64N(101) - 1}
			p.GPUs = append(p.GPUs, d)
			p.GPU += d.Bytes
			step := p.T - p.T%time.Minute.Milliseconds()
			if want[step] == nil {
				want[step] = map[int]peakOf{}
			}
			w, ok := want[step][g]
			if !ok {
				w = peakOf{-1 << 62, -1 << 62}
			}
			want[step][g] = peakOf{max(w.bytes, d.Bytes), max(w.util, d.Util)}
		}
		tl.Add(1, p)
	}
	if err := tl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	pts, err := tl.points(ctx, 1, ResCoarse, time.UnixMilli(t0), time.UnixMilli(t0+300_000))
	if err != nil || len(pts) != len(want) {
		t.Fatalf("%d coarse points, want %d: %v", len(pts), len(want), err)
	}
	for _, p := range pts {
		if len(p.GPUs) != len(want[p.T]) {
			t.Errorf("step %d: %+v, want GPUs %+v", p.T, p.GPUs, want[p.T])
			continue
		}
		for _, d := range p.GPUs {
			if w := want[p.T][d.Index]; d.Bytes != w.bytes || d.Util != w.util {
				t.Errorf("step %d GPU %d: %d bytes at %d%%, want the step's peak %d at %d%%", p.T, d.Index, d.Bytes, d.Util, w.bytes, w.util)
			}
		}
	}
}
