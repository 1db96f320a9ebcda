package ckpt

import (
	"errors"
	"io"
	"strings"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
	"github.com/vramguard/vramguard/internal/pickle"
)

// maxPickleRecord bounds data.pkl; the pickle of a state_dict with a
// hundred thousand tensors is well under this.
const maxPickleRecord = 256 << 20

// torchRoot returns the single root folder of a torch archive.
func torchRoot(a *ziparc.Archive) (string, bool) {
	root := ""
	for _, e := range a.Entries {
		i := strings.IndexByte(e.Name, '/')
		if i <= 0 {
			return "", false
		}
		if root == "" {
			root = e.Name[:i]
		} else if e.Name[:i] != root {
			return "", false
		}
	}
	if root == "" {
		return "", false
	}
	if _, ok := a.Lookup(root + "/data.pkl"); !ok {
		return "", false
	}
	return root, true
}

// inspectTorchZip fills rep from a torch zip archive.
func inspectTorchZip(r io.ReaderAt, size int64, rep *Report, opt Options) {
	a, err := ziparc.Open(r, size, ziparc.DefaultLimits)
	if err != nil {
		if errors.Is(err, ziparc.ErrNotZip) {
			rep.invalid("zip central directory missing: the file is truncated (torch.save did not finish?)")
		} else {
			rep.invalid("zip central directory: %v", err)
		}
		return
	}
	// Where torch's zip reader and a strict one disagree, the file was not
	// written by torch.save (see ziparc.Archive.Anomalies).
	for _, an := range a.Anomalies() {
		rep.finding("zip: %s", an)
	}
	if len(a.Duplicate) > 0 {
		rep.invalid("record %q appears more than once in the archive", a.Duplicate[0])
		return
	}
	if an := a.Anomalies(); len(an) > 0 {
		rep.invalid("zip archive: %s", an[0])
	}
	roots := map[string]bool{}
	for _, e := range a.Entries {
		i := strings.IndexByte(e.Name, '/')
		if i <= 0 {
			rep.invalid("record %q is not under a root folder", e.Name)
			return
		}
		roots[e.Name[:i]] = true
	}
	if len(roots) != 1 {
		rep.invalid("archive has %d root folders, torch writes one", len(roots))
		return
	}
	var root string
	for k := range roots {
		root = k
	}
	pk, ok := a.Lookup(root + "/data.pkl")
	if !ok {
		rep.invalid("archive has no %s/data.pkl record", root)
		return
	}
	if _, ok := a.Lookup(root + "/version"); !ok {
		if _, ok := a.Lookup(root + "/.data/version"); !ok {
			rep.finding("no version record")
		}
	}
	if _, ok := a.Lookup(root + "/constants.pkl"); ok {
		rep.Layout = "torchscript"
		rep.finding("TorchScript archive (torch.jit.save): code under %s/code is not inspected", root)
	}
	if pk.Size > maxPickleRecord {
		rep.invalid("read data.pkl: record %q is %d bytes, over the %d-byte limit", pk.Name, pk.Size, maxPickleRecord)
		return
	}
	// Decoded as it is read (inflated as the decoder goes, for a deflated
	// record): a record of zeros stops the decoder at its first byte.
	rec, err := a.Open(pk)
	if err != nil {
		rep.invalid("read data.pkl: %v", err)
		return
	}
	defer rec.Close()
	res, err := pickle.Decode(rec, 0, int64(pk.Size), pickle.DefaultLimits)
	recordGlobals(rep, res)
	if err != nil {
		if rerr := rec.Err(); rerr != nil {
			err = rerr
		}
		rep.invalid("data.pkl: %v", err)
		return
	}
	if res.End < int64(pk.Size) {
		rep.invalid("data.pkl holds %d bytes after its pickle ends (torch.save writes none)", int64(pk.Size)-res.End)
	}
	w := newWalker(rep)
	w.walk(res.Value, "", 0, "")
	classifyLayout(rep, res.Value)
	for _, b := range w.bad {
		rep.invalid("%s", b)
	}
	// Every storage the pickle names must be a record of the size it implies.
	for _, key := range w.order {
		st := w.storages[key]
		want := st.numel * elemSize[st.dtype]
		rep.Storages = append(rep.Storages, Storage{Key: key, DType: st.dtype, Numel: st.numel, Bytes: want, Location: st.location})
		rep.StorageBytes += want
		e, ok := a.Lookup(root + "/data/" + key)
		if !ok {
			rep.invalid("storage record %s/data/%s is missing", root, key)
			continue
		}
		if e.Size != uint64(want) {
			rep.invalid("storage record %s/data/%s holds %d bytes, the pickle implies %d (%d × %s)", root, key, e.Size, want, st.numel, st.dtype)
			continue
		}
		if opt.Structure {
			if _, err := a.DataOffset(e); err != nil {
				rep.invalid("%v", err)
			}
		}
	}
	if opt.Deep {
		deepCRC(a, rep, opt)
	}
}

func deepCRC(a *ziparc.Archive, rep *Report, opt Options) {
	buf := make([]byte, 1<<20)
	type rng struct {
		off        int64
		comp, size uint64
		method     uint16
		crc        uint32
	}
	done := map[rng]bool{}
	for i := range a.Entries {
		e := &a.Entries[i]
		// Records that share their bytes (a zip bomb's trick) are read once.
		k := rng{e.DataOff, e.CompSize, e.Size, e.Method, e.CRC32}
		if done[k] {
			continue
		}
		done[k] = true
		if err := a.CheckCRC(e, buf, opt.Progress); err != nil {
			rep.invalid("%v", err)
			if !opt.AllErrors {
				return
			}
		}
	}
}

func recordGlobals(rep *Report, res *pickle.Result) {
	if res == nil {
		return
	}
	for _, g := range res.Globals {
		rep.addGlobal(g.String())
	}
}

// classifyLayout names the common top-level shapes of a torch checkpoint.
func classifyLayout(rep *Report, v any) {
	if rep.Layout != "" {
		return
	}
	d, ok := v.(*pickle.Dict)
	if !ok {
		if c, ok := v.(*pickle.Call); ok {
			if g, _ := c.Global(); g.Name == "OrderedDict" {
				rep.Layout = "state_dict"
			} else if cs, ok := c.State.(*pickle.Dict); ok && isModuleState(cs) {
				rep.Layout = "module"
			}
		}
		return
	}
	if _, ok := d.Get("pytorch-lightning_version"); ok {
		rep.Layout = "lightning"
		return
	}
	if isOptimizerState(d) {
		rep.Layout = "optimizer"
		return
	}
	for i := range d.Len() {
		s, _ := d.Key(i).(string)
		if strings.Contains(s, "optimizer") || s == "epoch" || s == "step" || s == "global_step" {
			rep.Layout = "training"
			return
		}
	}
	allTensors := d.Len() > 0
	for i := range d.Len() {
		c, ok := d.Val(i).(*pickle.Call)
		if !ok {
			allTensors = false
			break
		}
		if g, _ := c.Global(); !strings.HasPrefix(g.String(), "torch._utils._rebuild") {
			allTensors = false
			break
		}
	}
	if allTensors {
		rep.Layout = "state_dict"
	}
}
