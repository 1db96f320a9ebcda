package snapshot

import (
	"cmp"
	"slices"
	"sort"
)

// The allocator's size classes: an allocation of up to smallAlloc bytes
// comes from the small pool, whose segments are smallSegment bytes.
const (
	smallAlloc   = 1 << 20
	smallSegment = 2 << 20
)

// OOMState is a device's allocator state just before an OOM trace entry:
// the state at the dump with every event the trace recorded after the OOM
// undone. A snapshot is dumped after the OOM, often long after (the
// program caught the error, freed memory, went on), so what the segments
// show at the dump is not what the allocator had when it failed.
type OOMState struct {
	// Index is the OOM entry's index in its device's trace; Undone the
	// events after it, to the dump.
	Index  int `json:"index"`
	Undone int `json:"events_after"`
	// Reserved is the bytes of every segment; Allocated those of live
	// blocks, PendingFree those freed but still in use by a stream, and
	// CachedFree the rest: free inside segments.
	Reserved    int64 `json:"reserved_bytes"`
	Allocated   int64 `json:"allocated_bytes"`
	PendingFree int64 `json:"pending_free_bytes"`
	CachedFree  int64 `json:"cached_free_bytes"`
	// LargestFree is the largest free piece of any segment; LargestUsable
	// the largest the failed allocation could have been given: on its
	// stream, outside private pools, in its pool (large above 1 MiB).
	LargestFree   int64 `json:"largest_free_block"`
	LargestUsable int64 `json:"largest_usable_free_block"`
	// Unusable, when a free piece large enough was there but not usable,
	// says why: "on stream N", "in a private pool", "in the small pool".
	Unusable string `json:"unusable,omitempty"`
	// Streams and PrivatePools count those the segments were on.
	Streams      int `json:"streams"`
	PrivatePools int `json:"private_pools"`
}

// span is a reserved range of device memory and the segment it is in.
type span struct {
	lo, hi     uint64
	stream     int64
	pool       [2]int64
	expandable bool
	large      bool
}

type liveBlock struct {
	size    int64
	pending bool
}

// stateAt replays device dev's trace back from the dump to the entry at
// index (an OOM) and returns the state just before it.
func (s *Snapshot) stateAt(dev, index int) *OOMState {
	tr := s.Traces[dev]
	var spans []span
	live := map[uint64]liveBlock{}
	// apart: where two free blocks of the dump meet. The allocator merges
	// neighbouring free blocks, so a file torch wrote has none; one that
	// shows two is believed.
	var apart []uint64
	for _, seg := range s.Segments {
		if seg.Device != dev {
			continue
		}
		spans = append(spans, span{seg.Address, seg.Address + uint64(max(seg.TotalSize, 0)), seg.Stream, seg.Pool,
			seg.Expandable, seg.Large})
		addr := seg.Address
		for i := range seg.Blocks {
			b := &seg.Blocks[i]
			if b.Address != 0 {
				addr = b.Address
			}
			if i > 0 && b.State == Inactive && seg.Blocks[i-1].State == Inactive {
				apart = append(apart, addr)
			}
			if b.State != Inactive {
				live[addr] = liveBlock{b.Size, b.State == ActivePendingFree}
			}
			addr += uint64(max(b.Size, 0))
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	// cut removes [lo, hi) from the spans
	cut := func(lo, hi uint64) {
		i := sort.Search(len(spans), func(i int) bool { return spans[i].hi > lo })
		for i < len(spans) && spans[i].lo < hi {
			sp := spans[i]
			var keep []span
			if sp.lo < lo {
				l := sp
				l.hi = lo
				keep = append(keep, l)
			}
			if sp.hi > hi {
				r := sp
				r.lo = hi
				keep = append(keep, r)
			}
			spans = slices.Replace(spans, i, i+1, keep...)
			i += len(keep)
		}
	}
	add := func(sp span) {
		cut(sp.lo, sp.hi)
		i := sort.Search(len(spans), func(i int) bool { return spans[i].lo >= sp.lo })
		spans = slices.Insert(spans, i, sp)
	}
	// neighbour is the span that ends at lo or starts at hi
	neighbour := func(lo, hi uint64) (span, bool) {
		for _, sp := range spans {
			if sp.hi == lo || sp.lo == hi {
				return sp, true
			}
		}
		return span{}, false
	}
	for i := len(tr) - 1; i > index; i-- {
		e := tr[i]
		size := uint64(max(e.Size, 0))
		switch e.Action {
		case ActionAlloc:
			delete(live, e.Addr)
		case ActionFreeRequested:
			if b, ok := live[e.Addr]; ok {
				b.pending = false
				live[e.Addr] = b
			}
		case ActionFreeCompleted:
			live[e.Addr] = liveBlock{e.Size, true}
		case ActionSegmentAlloc, ActionSegmentMap:
			cut(e.Addr, e.Addr+size)
		case ActionSegmentFree:
			add(span{e.Addr, e.Addr + size, e.Stream, [2]int64{}, false, size > smallSegment})
		case ActionSegmentUnmap:
			sp, ok := neighbour(e.Addr, e.Addr+size)
			if !ok {
				sp = span{stream: e.Stream, expandable: true, large: size > smallSegment}
			}
			sp.lo, sp.hi = e.Addr, e.Addr+size
			add(sp)
		}
	}
	oom := tr[index]
	st := &OOMState{Index: index, Undone: len(tr) - 1 - index}
	streams := map[int64]bool{}
	pools := map[[2]int64]bool{}
	for _, sp := range spans {
		st.Reserved = satAdd(st.Reserved, int64(sp.hi-sp.lo))
		streams[sp.stream] = true
		if sp.pool != [2]int64{} {
			pools[sp.pool] = true
		}
	}
	st.Streams, st.PrivatePools = len(streams), len(pools)
	addrs := make([]uint64, 0, len(live))
	for a, b := range live {
		addrs = append(addrs, a)
		if b.pending {
			st.PendingFree = satAdd(st.PendingFree, b.size)
		} else {
			st.Allocated = satAdd(st.Allocated, b.size)
		}
	}
	st.CachedFree = st.Reserved - st.Allocated - st.PendingFree
	slices.Sort(addrs)
	// the free pieces: each span less the live blocks in it, joined across
	// neighbouring spans of one expandable segment
	type piece struct {
		lo, hi uint64
		sp     span
	}
	slices.Sort(apart)
	var pieces []piece
	free := func(lo, hi uint64, sp span) {
		for k := sort.Search(len(apart), func(k int) bool { return apart[k] > lo }); k < len(apart) && apart[k] < hi; k++ {
			pieces = append(pieces, piece{lo, apart[k], sp})
			lo = apart[k]
		}
		pieces = append(pieces, piece{lo, hi, sp})
	}
	for _, sp := range spans {
		pos := sp.lo
		j := sort.Search(len(addrs), func(j int) bool { return addrs[j]+uint64(max(live[addrs[j]].size, 0)) > sp.lo })
		for ; j < len(addrs) && addrs[j] < sp.hi; j++ {
			a := addrs[j]
			if a > pos {
				free(pos, a, sp)
			}
			pos = max(pos, a+uint64(max(live[a].size, 0)))
		}
		if pos < sp.hi {
			free(pos, sp.hi, sp)
		}
	}
	var joined []piece
	for _, p := range pieces {
		if n := len(joined); n > 0 {
			q := &joined[n-1]
			if q.hi == p.lo && !inSorted(apart, p.lo) && q.sp.expandable && p.sp.expandable && q.sp.stream == p.sp.stream && q.sp.pool == p.sp.pool {
				q.hi = p.hi
				continue
			}
		}
		joined = append(joined, p)
	}
	wantLarge := oom.Size > smallAlloc
	var unusable piece
	for _, p := range joined {
		n := int64(p.hi - p.lo)
		st.LargestFree = max(st.LargestFree, n)
		if p.sp.stream == oom.Stream && p.sp.pool == [2]int64{} && p.sp.large == wantLarge {
			st.LargestUsable = max(st.LargestUsable, n)
		} else if n > int64(unusable.hi-unusable.lo) {
			unusable = p
		}
	}
	if n := int64(unusable.hi - unusable.lo); n >= oom.Size && n > st.LargestUsable {
		switch {
		case unusable.sp.stream != oom.Stream:
			st.Unusable = "on stream " + itoa(unusable.sp.stream) + ", not the allocation's stream " + itoa(oom.Stream)
		case unusable.sp.pool != [2]int64{}:
			st.Unusable = "in private pool (" + itoa(unusable.sp.pool[0]) + "," + itoa(unusable.sp.pool[1]) + ")"
		case !unusable.sp.large:
			st.Unusable = "in the small pool"
		default:
			st.Unusable = "in the large pool, and the allocation is a small one"
		}
	}
	return st
}

func inSorted(s []uint64, v uint64) bool {
	_, ok := slices.BinarySearch(s, v)
	return ok
}
