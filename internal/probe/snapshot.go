package probe

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/vramguard/vramguard/internal/ckpt/pickle"
	"github.com/vramguard/vramguard/internal/postmortem"
)

// Site is one place in Python code that holds live CUDA memory at the OOM.
// Site is one allocation site.
type Site = postmortem.AllocSite

// snapshotLimits bound the decode of a snapshot: the pickle package's
// defaults (which grow with it), with room for the larger snapshots a long
// history produces. Snapshots hold plain dicts, lists, strings and ints.
var snapshotLimits = func() pickle.Limits {
	l := pickle.DefaultLimits
	l.MaxBytes = 512 << 20
	l.MaxOps = 200_000_000
	l.MaxMemo = 20_000_000
	l.MaxStack = 20_000_000
	l.MaxString = 16 << 20
	return l
}()

// TopAllocationSites reads a memory snapshot written at an OOM
// (torch.cuda.memory._dump_snapshot: a pickle of plain dicts and lists,
// decoded here without executing anything) and returns the n sites holding
// the most live memory. A block's site is the innermost frame that is
// not inside torch itself, so a Linear layer's weight is charged to the
// model code that built it, not to torch/nn/modules/linear.py; when every
// frame is torch's, the innermost Python frame is used. Blocks recorded
// without a stack count under File "?".
func TopAllocationSites(path string, n int) ([]Site, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	res, err := pickle.DecodeBytes(b, snapshotLimits)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if len(res.Globals) > 0 {
		return nil, fmt.Errorf("snapshot %s: refers to Python global %s; a memory snapshot holds plain data only", path, res.Globals[0].Global)
	}
	top, ok := res.Value.(*pickle.Dict)
	if !ok {
		return nil, fmt.Errorf("snapshot %s: top level is %T, want a dict", path, res.Value)
	}
	segs, ok := dictList(top, "segments")
	if !ok {
		return nil, fmt.Errorf("snapshot %s: no \"segments\" list", path)
	}
	type key struct {
		file string
		line int64
		fn   string
	}
	sums := map[key]*Site{}
	for _, sv := range segs {
		seg, ok := sv.(*pickle.Dict)
		if !ok {
			continue
		}
		blocks, _ := dictList(seg, "blocks")
		for _, bv := range blocks {
			blk, ok := bv.(*pickle.Dict)
			if !ok {
				continue
			}
			if st, _ := dictString(blk, "state"); st != "active_allocated" {
				continue
			}
			size, _ := dictInt(blk, "size")
			f := blockSite(blk)
			k := key{f.file, f.line, f.name}
			s := sums[k]
			if s == nil {
				s = &Site{File: f.file, Line: f.line, Function: f.name}
				sums[k] = s
			}
			s.Bytes += size
			s.Blocks++
		}
	}
	out := make([]Site, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Site) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

type frame struct {
	file string
	line int64
	name string
}

// blockSite picks the frame a block is charged to. torch >= 2.1 stores the
// stack as "frames" on the block; torch 1.13/2.0 keep it in "history" (the
// last entry is the live allocation).
func blockSite(blk *pickle.Dict) frame {
	frames, ok := dictList(blk, "frames")
	if !ok || len(frames) == 0 {
		if hist, ok := dictList(blk, "history"); ok && len(hist) > 0 {
			if h, ok := hist[len(hist)-1].(*pickle.Dict); ok {
				frames, _ = dictList(h, "frames")
			}
		}
	}
	var firstPy *frame
	for _, fv := range frames {
		fd, ok := fv.(*pickle.Dict)
		if !ok {
			continue
		}
		file, _ := dictString(fd, "filename")
		if !strings.HasSuffix(file, ".py") {
			continue // C++ frames of stacks="all"
		}
		line, _ := dictInt(fd, "line")
		name, _ := dictString(fd, "name")
		f := frame{file, line, name}
		if firstPy == nil {
			firstPy = &f
		}
		if !insideTorch(file) {
			return f
		}
	}
	if firstPy != nil {
		return *firstPy
	}
	return frame{file: "?"}
}

func insideTorch(file string) bool {
	return strings.Contains(file, "/torch/") || strings.HasPrefix(file, "torch/")
}

func dictList(d *pickle.Dict, k string) ([]any, bool) {
	v, ok := d.Get(k)
	if !ok {
		return nil, false
	}
	switch l := v.(type) {
	case *pickle.List:
		return l.Items, true
	case pickle.Tuple:
		return l, true
	}
	return nil, false
}

func dictString(d *pickle.Dict, k string) (string, bool) {
	v, ok := d.Get(k)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

func dictInt(d *pickle.Dict, k string) (int64, bool) {
	v, ok := d.Get(k)
	if !ok {
		return 0, false
	}
	i, ok := v.(int64)
	return i, ok
}
