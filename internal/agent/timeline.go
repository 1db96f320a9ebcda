package agent

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/timeline"
)

// Point is the timeline's compact reading of a job.
type Point = timeline.Point

// Resolutions of stored timelines.
const (
	ResFine   = 0 // every sample (1 s at the default interval)
	ResCoarse = 1 // the peak of each CoarseStep
)

// Retention says how long each resolution is kept and how large the stored
// timelines may grow.
type Retention struct {
	// Fine is how long every sample is kept (default 24h).
	Fine time.Duration
	// Coarse is how long the per-CoarseStep peaks are kept (default 30 days).
	Coarse time.Duration
	// CoarseStep is the coarse resolution (default 1m).
	CoarseStep time.Duration
	// MaxBytes bounds the stored timeline payload; the oldest blocks go
	// first when it is exceeded (0: no bound beyond the ages).
	MaxBytes int64
}

func (r Retention) withDefaults() Retention {
	if r.Fine <= 0 {
		r.Fine = 24 * time.Hour
	}
	if r.Coarse <= 0 {
		r.Coarse = 30 * 24 * time.Hour
	}
	if r.CoarseStep <= 0 {
		r.CoarseStep = time.Minute
	}
	return r
}

// Block lengths: a fine block holds one minute of samples, a coarse block
// one hour of per-minute peaks (with the default step). Each is one row.
const (
	fineBlock      = time.Minute
	coarseBlockLen = 60 // coarse points per block
)

// Timelines keeps every job's memory timeline: recent points in memory
// until their block is complete, complete blocks in the store at two
// resolutions. Safe for concurrent use.
type Timelines struct {
	st  *store.Store
	ret Retention

	mu      sync.Mutex
	jobs    map[int64]*jobBuf
	pending []store.AgentBlock
}

type jobBuf struct {
	fine        []Point
	fineStart   int64 // ms, the block the fine points belong to
	coarse      []Point
	coarseStart int64
	acc         Point // running peak of the current coarse step
	accStep     int64 // ms, start of the step acc covers; 0 = empty
}

// NewTimelines returns timelines stored in st.
func NewTimelines(st *store.Store, ret Retention) *Timelines {
	return &Timelines{st: st, ret: ret.withDefaults(), jobs: map[int64]*jobBuf{}}
}

// Retention returns the retention in force.
func (tl *Timelines) Retention() Retention { return tl.ret }

// Add appends p to job's timeline. Points must come in time order per job;
// one older than the job's last is ignored. Complete blocks wait for Flush.
func (tl *Timelines) Add(job int64, p Point) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	b := tl.jobs[job]
	if b == nil {
		b = &jobBuf{}
		tl.jobs[job] = b
	}
	if n := len(b.fine); n > 0 && p.T <= b.fine[n-1].T {
		return
	}
	fb := p.T - p.T%fineBlock.Milliseconds()
	if len(b.fine) > 0 && fb != b.fineStart {
		tl.pending = append(tl.pending, encodeBlock(job, ResFine, b.fine))
		b.fine = b.fine[:0]
	}
	if len(b.fine) == 0 {
		b.fineStart = fb
	}
	b.fine = append(b.fine, p)

	step := tl.ret.CoarseStep.Milliseconds()
	cs := p.T - p.T%step
	if b.accStep != 0 && cs != b.accStep {
		tl.closeStep(job, b)
	}
	if b.accStep == 0 {
		b.accStep, b.acc = cs, Point{T: cs, GPU: p.GPU, RSS: p.RSS, Alloc: p.Alloc, Reserved: p.Reserved, Util: p.Util, GPUs: p.GPUs}
	} else {
		b.acc = peak(b.acc, p)
	}
}

// closeStep moves the finished coarse step into the coarse buffer.
func (tl *Timelines) closeStep(job int64, b *jobBuf) {
	blockLen := tl.ret.CoarseStep.Milliseconds() * coarseBlockLen
	cb := b.accStep - b.accStep%blockLen
	if len(b.coarse) > 0 && cb != b.coarseStart {
		tl.pending = append(tl.pending, encodeBlock(job, ResCoarse, b.coarse))
		b.coarse = b.coarse[:0]
	}
	if len(b.coarse) == 0 {
		b.coarseStart = cb
	}
	b.coarse = append(b.coarse, b.acc)
	b.accStep = 0
}

// peak is the point of a's time whose every figure is the higher of a's
// and p's, each GPU's too.
func peak(a, p Point) Point {
	return Point{T: a.T, GPU: max(a.GPU, p.GPU), RSS: max(a.RSS, p.RSS), Alloc: max(a.Alloc, p.Alloc), Reserved: max(a.Reserved, p.Reserved), Util: max(a.Util, p.Util),
		GPUs: peakGPUs(a.GPUs, p.GPUs)}
}

// peakGPUs is each GPU's higher memory and utilisation of a and p (both in
// index order), a GPU only one has as that one has it. It returns a itself
// when a already holds the peak (the common case: memory moves in steps),
// and otherwise a new slice: neither a's nor p's is written.
func peakGPUs(a, p []timeline.DevicePoint) []timeline.DevicePoint {
	if len(p) == 0 {
		return a
	}
	if len(a) == len(p) {
		same := true
		for i := range a {
			if a[i].Index != p[i].Index || a[i].Bytes < p[i].Bytes || a[i].Util < p[i].Util {
				same = false
				break
			}
		}
		if same {
			return a
		}
	}
	out := make([]timeline.DevicePoint, 0, max(len(a), len(p)))
	i, j := 0, 0
	for i < len(a) || j < len(p) {
		switch {
		case j == len(p) || (i < len(a) && a[i].Index < p[j].Index):
			out = append(out, a[i])
			i++
		case i == len(a) || p[j].Index < a[i].Index:
			out = append(out, p[j])
			j++
		default:
			out = append(out, timeline.DevicePoint{Index: a[i].Index, Bytes: max(a[i].Bytes, p[j].Bytes), Util: max(a[i].Util, p[j].Util)})
			i++
			j++
		}
	}
	return out
}

// End stores what is buffered for job (it has gone) and forgets it.
func (tl *Timelines) End(job int64) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.endLocked(job)
}

func (tl *Timelines) endLocked(job int64) {
	b := tl.jobs[job]
	if b == nil {
		return
	}
	if b.accStep != 0 {
		tl.closeStep(job, b)
	}
	if len(b.fine) > 0 {
		tl.pending = append(tl.pending, encodeBlock(job, ResFine, b.fine))
	}
	if len(b.coarse) > 0 {
		tl.pending = append(tl.pending, encodeBlock(job, ResCoarse, b.coarse))
	}
	delete(tl.jobs, job)
}

// Flush writes complete blocks to the store.
func (tl *Timelines) Flush(ctx context.Context) error {
	tl.mu.Lock()
	p := tl.pending
	tl.pending = nil
	tl.mu.Unlock()
	if err := tl.st.AddAgentBlocks(ctx, p); err != nil {
		tl.mu.Lock()
		tl.pending = append(p, tl.pending...)
		tl.mu.Unlock()
		return err
	}
	return nil
}

// Close stores every buffer, complete or not.
func (tl *Timelines) Close(ctx context.Context) error {
	tl.mu.Lock()
	for job := range tl.jobs {
		tl.endLocked(job)
	}
	tl.mu.Unlock()
	return tl.Flush(ctx)
}

// Prune applies the retention at now: drops blocks past their age, then the
// oldest blocks while the payload is over MaxBytes.
func (tl *Timelines) Prune(ctx context.Context, now time.Time) error {
	if _, err := tl.st.PruneAgentBlocks(ctx, ResFine, now.Add(-tl.ret.Fine)); err != nil {
		return err
	}
	if _, err := tl.st.PruneAgentBlocks(ctx, ResCoarse, now.Add(-tl.ret.Coarse)); err != nil {
		return err
	}
	if err := tl.st.PruneAgentJobs(ctx, now.Add(-tl.ret.Coarse)); err != nil {
		return err
	}
	if tl.ret.MaxBytes <= 0 {
		return nil
	}
	// Fine blocks go first (the coarse ones still tell the story), an hour
	// at a time.
	for _, res := range []int{ResFine, ResCoarse} {
		for range 10000 {
			total, err := tl.payload(ctx)
			if err != nil {
				return err
			}
			if total <= tl.ret.MaxBytes {
				return nil
			}
			oldest, ok, err := tl.st.OldestAgentBlock(ctx, res)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if _, err := tl.st.PruneAgentBlocks(ctx, res, oldest.Add(time.Hour)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (tl *Timelines) payload(ctx context.Context) (int64, error) {
	var total int64
	for _, res := range []int{ResFine, ResCoarse} {
		n, err := tl.st.AgentBlockBytes(ctx, res)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Query returns job's points in [from, to]: every sample when the range is
// within the fine retention and at most fineView long, the coarse peaks
// otherwise; then at most maxPoints of them (bucket peaks) when maxPoints > 0.
func (tl *Timelines) Query(ctx context.Context, job int64, from, to time.Time, maxPoints int) ([]Point, int, error) {
	res := ResFine
	if to.Sub(from) > fineView || from.Before(to.Add(-tl.ret.Fine)) {
		res = ResCoarse
	}
	out, err := tl.points(ctx, job, res, from, to)
	return downsample(out, maxPoints), res, err
}

// Samples returns job's points in [from, to] for accounting: every sample
// within the fine retention, and before it the coarse per-step peaks.
func (tl *Timelines) Samples(ctx context.Context, job int64, from, to time.Time) (fine, coarse []Point, err error) {
	split := to.Add(-tl.ret.Fine)
	if from.After(split) {
		split = from
	}
	if from.Before(split) {
		if coarse, err = tl.points(ctx, job, ResCoarse, from, split.Add(-time.Millisecond)); err != nil {
			return nil, nil, err
		}
	}
	fine, err = tl.points(ctx, job, ResFine, split, to)
	return fine, coarse, err
}

// points is job's points at resolution res in [from, to], stored and
// buffered.
func (tl *Timelines) points(ctx context.Context, job int64, res int, from, to time.Time) ([]Point, error) {
	blocks, err := tl.st.AgentBlocks(ctx, job, res, from, to)
	if err != nil {
		return nil, err
	}
	lo, hi := from.UnixMilli(), to.UnixMilli()
	var out []Point
	keep := func(ps []Point) {
		for _, p := range ps {
			if p.T >= lo && p.T <= hi && (len(out) == 0 || p.T > out[len(out)-1].T) {
				out = append(out, p)
			}
		}
	}
	for _, b := range blocks {
		ps, err := decodeBlock(b.Data)
		if err != nil {
			return nil, fmt.Errorf("job %d block at %s: %w", job, b.T0.Format(time.RFC3339), err)
		}
		keep(ps)
	}
	tl.mu.Lock()
	if b := tl.jobs[job]; b != nil {
		if res == ResFine {
			keep(b.fine)
		} else {
			keep(b.coarse)
			if b.accStep != 0 {
				keep([]Point{b.acc})
			}
		}
	}
	tl.mu.Unlock()
	return out, nil
}

// fineView is the longest range answered with every sample.
const fineView = 6 * time.Hour

// bucketSize is how many of m points downsample(ps, n) puts in a bucket.
func bucketSize(m, n int) int {
	if n <= 0 || m <= n {
		return 1
	}
	return (m + n - 1) / n
}

// downsample keeps at most n points, each the peak of its bucket.
func downsample(ps []Point, n int) []Point {
	if n <= 0 || len(ps) <= n {
		return ps
	}
	per := bucketSize(len(ps), n)
	out := make([]Point, 0, n)
	for i := 0; i < len(ps); i += per {
		acc := ps[i]
		for _, p := range ps[i+1 : min(i+per, len(ps))] {
			acc = peak(acc, p)
		}
		out = append(out, acc)
	}
	return out
}

// Block encoding (version 3): a version byte, the point count, then per
// point the time step in ms and the change of each value from the previous
// point (zig-zag varints: GPU, RSS, allocated, reserved, utilisation), then
// the point's per-GPU readings (GPUs): 1 and the GPU's index for one GPU
// whose reading is the point's total (a job on one GPU), else twice their
// number and for each its index and the change of its memory and
// utilisation from the previous point's reading at the same place when
// that is the same GPU (from 0 otherwise); the whole deflated. Memory moves in steps, so most changes
// are zero or repeat and compress well. Older blocks still read: version 2
// (no per-GPU readings: GPUs nil) and version 1 (no utilisation either:
// -1).
const blockVersion = 3

var flateWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(io.Discard, flate.BestSpeed)
	return w
}}

var flateReaders sync.Pool

func encodeBlock(job int64, res int, ps []Point) store.AgentBlock {
	var raw []byte
	raw = append(raw, blockVersion)
	raw = binary.AppendUvarint(raw, uint64(len(ps)))
	prev := Point{T: ps[0].T}
	for _, p := range ps {
		raw = binary.AppendUvarint(raw, uint64(p.T-prev.T))
		raw = binary.AppendVarint(raw, p.GPU-prev.GPU)
		raw = binary.AppendVarint(raw, p.RSS-prev.RSS)
		raw = binary.AppendVarint(raw, p.Alloc-prev.Alloc)
		raw = binary.AppendVarint(raw, p.Reserved-prev.Reserved)
		raw = binary.AppendVarint(raw, p.Util-prev.Util)
		if len(p.GPUs) == 1 && p.GPUs[0].Bytes == p.GPU && p.GPUs[0].Util == p.Util {
			// a job on one GPU: its reading there is its total
			raw = binary.AppendUvarint(raw, 1)
			raw = binary.AppendUvarint(raw, uint64(p.GPUs[0].Index))
			prev = p
			continue
		}
		raw = binary.AppendUvarint(raw, uint64(len(p.GPUs))<<1)
		for k, d := range p.GPUs {
			was := prevGPU(prev.GPUs, k, d.Index)
			raw = binary.AppendUvarint(raw, uint64(d.Index))
			raw = binary.AppendVarint(raw, d.Bytes-was.Bytes)
			raw = binary.AppendVarint(raw, d.Util-was.Util)
		}
		prev = p
	}
	var buf bytes.Buffer
	binary.Write(&buf, binary.BigEndian, ps[0].T)
	// A flate writer costs ~1 MB to set up; reuse them.
	w := flateWriters.Get().(*flate.Writer)
	w.Reset(&buf)
	w.Write(raw)
	w.Close()
	flateWriters.Put(w)
	return store.AgentBlock{Job: job, Res: res, T0: time.UnixMilli(ps[0].T), T1: time.UnixMilli(ps[len(ps)-1].T), N: len(ps), Data: buf.Bytes()}
}

// prevGPU is what a point's k-th per-GPU reading, of GPU index, is encoded
// against: the previous point's k-th when it is of the same GPU, else zero.
func prevGPU(prev []timeline.DevicePoint, k, index int) timeline.DevicePoint {
	if k < len(prev) && prev[k].Index == index {
		return prev[k]
	}
	return timeline.DevicePoint{Index: index}
}

var errBlock = errors.New("corrupt timeline block")

func decodeBlock(data []byte) ([]Point, error) {
	if len(data) < 8 {
		return nil, errBlock
	}
	t0 := int64(binary.BigEndian.Uint64(data))
	fr, _ := flateReaders.Get().(io.ReadCloser)
	if fr == nil {
		fr = flate.NewReader(bytes.NewReader(data[8:]))
	} else {
		_ = fr.(flate.Resetter).Reset(bytes.NewReader(data[8:]), nil)
	}
	raw, err := io.ReadAll(fr)
	flateReaders.Put(fr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBlock, err)
	}
	if len(raw) == 0 || raw[0] < 1 || raw[0] > blockVersion {
		return nil, fmt.Errorf("%w: unknown version", errBlock)
	}
	version := raw[0]
	fields := 5
	if version == 1 {
		fields = 4
	}
	r := bytes.NewReader(raw[1:])
	n, err := binary.ReadUvarint(r)
	if err != nil || n > 1<<20 {
		return nil, errBlock
	}
	out := make([]Point, 0, n)
	var slab []timeline.DevicePoint // the points' GPUs, one allocation a block mostly
	prev := Point{T: t0}
	for range n {
		dt, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, errBlock
		}
		var d [5]int64
		for i := range fields {
			if d[i], err = binary.ReadVarint(r); err != nil {
				return nil, errBlock
			}
		}
		p := Point{T: prev.T + int64(dt), GPU: prev.GPU + d[0], RSS: prev.RSS + d[1], Alloc: prev.Alloc + d[2], Reserved: prev.Reserved + d[3], Util: prev.Util + d[4]}
		if fields == 4 {
			p.Util = -1
		}
		if version >= 3 {
			h, err := binary.ReadUvarint(r)
			if err != nil || h > 1<<11 {
				return nil, errBlock
			}
			if h&1 == 1 { // one GPU, with the job's figures
				idx, err := binary.ReadUvarint(r)
				if err != nil || idx > 1<<16 {
					return nil, errBlock
				}
				if cap(slab) == len(slab) {
					slab = make([]timeline.DevicePoint, 0, max(int(n), 64))
				}
				slab = append(slab, timeline.DevicePoint{Index: int(idx), Bytes: p.GPU, Util: p.Util})
				p.GPUs = slab[len(slab)-1 : len(slab) : len(slab)]
			} else if m := h >> 1; m > 0 {
				if cap(slab)-len(slab) < int(m) {
					slab = make([]timeline.DevicePoint, 0, max(int(m)*int(n), 64))
				}
				at := len(slab)
				for k := range int(m) {
					idx, err := binary.ReadUvarint(r)
					if err != nil || idx > 1<<16 {
						return nil, errBlock
					}
					db, err1 := binary.ReadVarint(r)
					du, err2 := binary.ReadVarint(r)
					if err1 != nil || err2 != nil {
						return nil, errBlock
					}
					was := prevGPU(prev.GPUs, k, int(idx))
					slab = append(slab, timeline.DevicePoint{Index: int(idx), Bytes: was.Bytes + db, Util: was.Util + du})
				}
				p.GPUs = slab[at:len(slab):len(slab)]
			}
		}
		out = append(out, p)
		prev = p
	}
	return out, nil
}
