package agent

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"reflect"
	"testing"
)

// TestBlockVersions: a block keeps each point's utilisation; a version 1
// block (written before it was stored) still reads, its utilisation
// unknown (-1).
func TestBlockVersions(t *testing.T) {
	ps := []Point{
		{T: 1000, GPU: 5 << 30, RSS: 1 << 30, Alloc: -1, Reserved: -1, Util: 80},
		{T: 2000, GPU: 5 << 30, RSS: 1 << 30, Alloc: -1, Reserved: -1, Util: 0},
		{T: 3000, GPU: 6 << 30, RSS: 1 << 30, Alloc: 2 << 30, Reserved: 3 << 30, Util: -1},
	}
	got, err := decodeBlock(encodeBlock(1, ResFine, ps).Data)
	if err != nil || !reflect.DeepEqual(got, ps) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// version 1, as it was written: four changes a point
	raw := []byte{1}
	raw = binary.AppendUvarint(raw, uint64(len(ps)))
	prev := Point{T: ps[0].T}
	for _, p := range ps {
		raw = binary.AppendUvarint(raw, uint64(p.T-prev.T))
		raw = binary.AppendVarint(raw, p.GPU-prev.GPU)
		raw = binary.AppendVarint(raw, p.RSS-prev.RSS)
		raw = binary.AppendVarint(raw, p.Alloc-prev.Alloc)
		raw = binary.AppendVarint(raw, p.Reserved-prev.Reserved)
		prev = p
	}
	var buf bytes.Buffer
	binary.Write(&buf, binary.BigEndian, ps[0].T)
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(raw)
	w.Close()
	got, err = decodeBlock(buf.Bytes())
	if err != nil || len(got) != len(ps) {
		t.Fatalf("version 1: %+v %v", got, err)
	}
	for i, p := range got {
		want := ps[i]
		want.Util = -1
		if p != want {
			t.Errorf("version 1 point %d: %+v, want %+v", i, p, want)
		}
	}
}
