package ckpt

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/vramguard/vramguard/internal/pickle"
)

// dcpItem is one item a DCP .metadata names: torch.distributed.checkpoint
// torch.saves every item (tensors and bytes alike) at an offset of a
// .distcp shard, and its reader torch.loads each slice.
type dcpItem struct {
	name        string
	rel         string
	off, length int64
}

// dcpStorageItems reads the items of the DCP directory dir from its
// .metadata (bounded as detection bounds it).
func dcpStorageItems(dir string) ([]dcpItem, error) {
	f, size, err := openFile(filepath.Join(dir, ".metadata"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxDCPMetadata {
		return nil, fmt.Errorf(".metadata is %d bytes, over the %d-byte bound", size, maxDCPMetadata)
	}
	res, err := decodePickle(f, 0, size)
	if err != nil {
		return nil, fmt.Errorf(".metadata: %v", err)
	}
	c, _ := res.Value.(*pickle.Call)
	var state *pickle.Dict
	if c != nil {
		state = asStateDict(c)
	}
	if state == nil {
		return nil, fmt.Errorf(".metadata is not a DCP Metadata object")
	}
	sd, _ := state.Get("storage_data")
	d := asDict(sd)
	if d == nil {
		return nil, fmt.Errorf(".metadata has no storage_data dict")
	}
	var items []dcpItem
	for i := range d.Len() {
		k := d.Key(i)
		info, _ := d.Val(i).(*pickle.Call)
		var s *pickle.Dict
		if info != nil {
			s = asStateDict(info)
		}
		if s == nil {
			return nil, fmt.Errorf("storage_data entry %d is not a _StorageInfo", i)
		}
		rel, o, l, ok := storageSpan(s)
		if !ok {
			return nil, fmt.Errorf("storage_data entry %d is malformed", i)
		}
		items = append(items, dcpItem{name: describeIndex(k), rel: rel, off: o, length: l})
	}
	return items, nil
}

// scanDCPShard scans every item .metadata places in the shard p, at its
// own offset, as torch.load reads that slice (a shard holds many
// torch.save items back to back; read whole, only one of them would be
// seen). Items .metadata cannot place are not understood.
func scanDCPShard(p string, res *ScanResult, opts ScanOptions) {
	items, err := dcpStorageItems(filepath.Dir(p))
	if err != nil {
		res.notUnderstood("", "a DCP shard whose items cannot be placed (%v): torch's reader torch.loads each item at its offset", err)
		res.finish()
		return
	}
	f, size, err := openFile(p)
	if err != nil {
		res.Errors = append(res.Errors, err.Error())
		res.finish()
		return
	}
	defer f.Close()
	// The whole-file view is not what any loader reads.
	*res = *newScanResult(p, FormatDCP, opts)
	base := filepath.Base(p)
	for _, it := range items {
		if it.rel != base {
			continue
		}
		where := fmt.Sprintf("item %s at byte %d", it.name, it.off)
		if it.off+it.length > size {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: runs past the end of the shard (%d bytes)", where, size))
			continue
		}
		sec := io.NewSectionReader(f, it.off, it.length)
		sub := newScanResult(p, detectFile(sec, it.length), opts)
		scanReader(sec, it.length, sub)
		res.Pickles += sub.Pickles
		for _, h := range sub.Hits {
			h.Record = where + ": " + h.Record
			h.Offset += it.off
			res.Hits = append(res.Hits, h)
		}
		for _, e := range sub.Errors {
			res.Errors = append(res.Errors, where+": "+e)
		}
		for _, e := range sub.NotUnderstood {
			res.NotUnderstood = append(res.NotUnderstood, where+": "+e)
		}
	}
	res.finish()
}

// isDCPShard: a file named as FileSystemWriter names shards, next to a
// .metadata.
func isDCPShard(p string) bool {
	return dcpShardName.MatchString(filepath.Base(p)) && fileExists(filepath.Join(filepath.Dir(p), ".metadata"))
}
