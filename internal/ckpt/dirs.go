package ckpt

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/pickle"
)

// inspectDir handles directory checkpoints: torch.distributed.checkpoint
// (DCP) and HF Trainer checkpoint-N directories.
func inspectDir(dir string, opt Options) (*Report, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, Unreadable(err)
	}
	if _, err := os.ReadDir(dir); err != nil {
		return nil, Unreadable(err)
	}
	rep := &Report{Path: dir, ModTime: st.ModTime(), Valid: true}
	defer rep.finish()
	rep.Format = detectDir(dir)
	switch rep.Format {
	case FormatDCP:
		inspectDCP(dir, rep, opt)
	case FormatHFTrainer:
		inspectHF(dir, rep, opt)
	default:
		rep.invalid("not a checkpoint directory: no .metadata/.distcp (torch.distributed.checkpoint) or trainer_state.json (HF Trainer)")
	}
	return rep, nil
}

// inspectDCP checks a torch.distributed.checkpoint directory: the .metadata
// file is written last (renamed from .metadata.tmp), so it is the commit
// marker; every storage it lists must lie inside its .distcp file.
func inspectDCP(dir string, rep *Report, opt Options) {
	rep.ModTime = newestMTime(dir, rep.ModTime)
	rep.Size = dirSize(dir)
	mp := filepath.Join(dir, ".metadata")
	f, size, err := openFile(mp)
	if err != nil {
		if fileExists(filepath.Join(dir, ".metadata.tmp")) {
			rep.invalid("no .metadata (only .metadata.tmp): the save did not finish")
		} else {
			rep.invalid("no .metadata: the save did not finish or the directory is incomplete")
		}
		return
	}
	defer f.Close()
	cr := &countingReaderAt{r: f}
	res, err := decodePickle(cr, 0, size)
	rep.BytesRead += cr.n.Load()
	recordGlobals(rep, res)
	if err != nil {
		rep.invalid(".metadata: %v", err)
		return
	}
	md, ok := res.Value.(*pickle.Call)
	if !ok {
		rep.invalid(".metadata holds %T, not a Metadata object", res.Value)
		return
	}
	state := asStateDict(md)
	if state == nil {
		rep.invalid(".metadata object has no state")
		return
	}
	// Tensors: state_dict_metadata maps FQN -> TensorStorageMetadata.
	if sdm, ok := state.Get("state_dict_metadata"); ok {
		if d := asDict(sdm); d != nil {
			for i := range d.Len() {
				fqn := pickle.KeyString(d.Key(i))
				c, ok := d.Val(i).(*pickle.Call)
				if !ok {
					continue
				}
				s := asStateDict(c)
				if s == nil {
					continue
				}
				props, _ := s.Get("properties")
				dt := ""
				if pc, ok := props.(*pickle.Call); ok {
					if ps := asStateDict(pc); ps != nil {
						v, _ := ps.Get("dtype")
						dt, _ = dtypeOf(v)
					}
				}
				sz, hasSize := s.Get("size")
				if !hasSize {
					rep.Scalars = ensure(rep.Scalars)
					continue // BytesStorageMetadata: an arbitrary object
				}
				shape, _ := intTuple(sz)
				n, ok := shapeNumel(shape)
				b, ok2 := mulSize(n, elemSize[dt])
				if !ok || !ok2 {
					rep.invalid("%s: shape %v is more bytes than a 64-bit size holds", fqn, shape)
					continue
				}
				rep.Tensors = append(rep.Tensors, Tensor{Path: fqn, DType: dt, Shape: shape, Bytes: b, Role: roleOf(fqn)})
			}
		}
	}
	// Storage data: MetadataIndex -> _StorageInfo(relative_path, offset, length).
	sd, ok := state.Get("storage_data")
	if !ok {
		rep.invalid(".metadata has no storage_data")
		return
	}
	d := asDict(sd)
	if d == nil {
		rep.invalid(".metadata storage_data is not a dict")
		return
	}
	sizes := map[string]int64{}
	for i := range d.Len() {
		k := d.Key(i)
		info, ok := d.Val(i).(*pickle.Call)
		if !ok {
			rep.invalid("storage_data entry %d is %T", i, d.Val(i))
			return
		}
		s := asStateDict(info)
		if s == nil {
			rep.invalid("storage_data entry %d has no state", i)
			return
		}
		rel, o, l, ok := storageSpan(s)
		if !ok {
			rep.invalid("storage_data entry %d is malformed", i)
			return
		}
		if strings.Contains(rel, "/") || strings.Contains(rel, `\`) || rel == ".." {
			rep.invalid("storage_data entry %d points outside the directory: %q", i, rel)
			return
		}
		fs, seen := sizes[rel]
		if !seen {
			st, err := os.Stat(filepath.Join(dir, rel))
			if err != nil {
				rep.invalid("storage file %s is missing", rel)
				return
			}
			fs = st.Size()
			sizes[rel] = fs
		}
		if o+l > fs {
			rep.invalid("%s: item %s needs bytes [%d, %d), the file has %d: truncated", rel, describeIndex(k), o, o+l, fs)
			return
		}
		rep.StorageBytes += l
		if opt.Deep {
			if err := deepFile(filepath.Join(dir, rel), o, l, opt.Progress); err != nil {
				rep.invalid("%s: %v", rel, err)
				return
			}
		}
	}
	// Bytes items (epoch, step, rng state...) are torch.save'd objects at an
	// offset in a .distcp file; read their scalars.
	readDCPScalars(dir, state, d, rep)
}

func describeIndex(k any) string {
	if c, ok := k.(*pickle.Call); ok {
		if s := asStateDict(c); s != nil {
			if fqn, ok := s.Get("fqn"); ok {
				return pickle.KeyString(fqn)
			}
		}
	}
	return pickle.KeyString(k)
}

// readDCPScalars opens each BytesStorageMetadata item and walks it.
func readDCPScalars(dir string, state *pickle.Dict, storage *pickle.Dict, rep *Report) {
	for i := range storage.Len() {
		fqn := describeIndex(storage.Key(i))
		isTensor := false
		for _, t := range rep.Tensors {
			if t.Path == fqn {
				isTensor = true
				break
			}
		}
		if isTensor {
			continue
		}
		s := asStateDict(storage.Val(i).(*pickle.Call))
		rp, _ := s.Get("relative_path")
		off, _ := s.Get("offset")
		ln, _ := s.Get("length")
		f, _, err := openFile(filepath.Join(dir, rp.(string)))
		if err != nil {
			continue
		}
		sub := &Report{Valid: true}
		inspectReader(io.NewSectionReader(f, off.(int64), ln.(int64)), ln.(int64), sub, Options{})
		f.Close()
		rep.Scalars = ensure(rep.Scalars)
		for p, v := range sub.Scalars {
			if p == "." {
				rep.Scalars[fqn] = v
			} else {
				rep.Scalars[fqn+"."+p] = v
			}
		}
		for _, g := range sub.Globals {
			rep.addGlobal(g)
		}
	}
}

func ensure(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func roleOf(path string) string {
	if strings.HasPrefix(path, "optim") || strings.Contains(path, ".optim") {
		return "optimizer"
	}
	return "model"
}

// storageSpan reads a _StorageInfo's state: the file its bytes are in
// (relative_path) and where (offset, length, neither negative); false when
// any of them is missing or of another type.
func storageSpan(s *pickle.Dict) (rel string, off, length int64, ok bool) {
	rp, _ := s.Get("relative_path")
	o, _ := s.Get("offset")
	l, _ := s.Get("length")
	rel, ok1 := rp.(string)
	off, ok2 := o.(int64)
	length, ok3 := l.(int64)
	return rel, off, length, ok1 && ok2 && ok3 && off >= 0 && length >= 0
}

// asStateDict returns the BUILD state of an object when it is a dict.
func asStateDict(c *pickle.Call) *pickle.Dict {
	if c == nil {
		return nil
	}
	switch s := c.State.(type) {
	case *pickle.Dict:
		return s
	case pickle.Tuple: // (dict, slots) for dataclasses with slots
		if len(s) == 2 {
			if d, ok := s[1].(*pickle.Dict); ok {
				if d0, ok := s[0].(*pickle.Dict); ok {
					out := pickle.NewDict()
					for _, src := range []*pickle.Dict{d0, d} {
						for i := range src.Len() {
							out.Set(src.Key(i), src.Val(i))
						}
					}
					return out
				}
				return d
			}
			if d, ok := s[0].(*pickle.Dict); ok {
				return d
			}
		}
	}
	return nil
}

func deepFile(path string, off, n int64, progress func(int64)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return readAll(f, off, n, progress)
}

func newestMTime(dir string, t0 time.Time) time.Time {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return t0
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.ModTime().After(t0) {
			t0 = info.ModTime()
		}
	}
	return t0
}

func dirSize(dir string) int64 {
	var n int64
	walkFollow(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// hfState is the part of trainer_state.json that matters here.
type hfState struct {
	GlobalStep          *int64           `json:"global_step"`
	Epoch               *float64         `json:"epoch"`
	BestMetric          *float64         `json:"best_metric"`
	BestModelCheckpoint *string          `json:"best_model_checkpoint"`
	LogHistory          []map[string]any `json:"log_history"`
	MaxSteps            *int64           `json:"max_steps"`
	NumTrainEpochs      *float64         `json:"num_train_epochs"`
	TrainBatchSize      *int64           `json:"train_batch_size"`
	SaveSteps           *int64           `json:"save_steps"`
}

// inspectHF checks an HF Trainer checkpoint-N directory: trainer_state.json
// parses, weights are present, and every checkpoint file in it is sound.
func inspectHF(dir string, rep *Report, opt Options) {
	rep.ModTime = newestMTime(dir, rep.ModTime)
	rep.Size = dirSize(dir)
	b, err := readBounded(filepath.Join(dir, "trainer_state.json"), maxSmallJSON)
	if err != nil {
		rep.invalid("trainer_state.json: %v", err)
		return
	}
	rep.BytesRead += int64(len(b))
	var hs hfState
	if err := json.Unmarshal(b, &hs); err != nil {
		rep.invalid("trainer_state.json: %v", err)
		return
	}
	rep.Scalars = ensure(rep.Scalars)
	if hs.GlobalStep == nil {
		// The Trainer names the folder after the step it saved at.
		if m := hfCheckpointName.FindStringSubmatch(filepath.Base(dir)); m != nil {
			if n, err := strconv.ParseInt(m[1], 10, 64); err == nil {
				hs.GlobalStep = &n
			}
		}
	}
	if hs.GlobalStep != nil {
		rep.Step = hs.GlobalStep
		rep.Scalars["global_step"] = *hs.GlobalStep
	}
	if hs.Epoch != nil {
		rep.Scalars["epoch"] = *hs.Epoch
		e := int64(*hs.Epoch)
		rep.Epoch = &e
		ev := *hs.Epoch
		rep.EpochValue = &ev
	}
	rep.Run = hfRunIdentity(dir, &hs)
	rep.Incomplete = hfIncomplete(dir)
	if hs.BestMetric != nil {
		rep.Scalars["best_metric"] = *hs.BestMetric
	}
	if hs.BestModelCheckpoint != nil && *hs.BestModelCheckpoint != "" {
		rep.Scalars["best_model_checkpoint"] = *hs.BestModelCheckpoint
	}
	if n := len(hs.LogHistory); n > 0 {
		for k, v := range hs.LogHistory[n-1] {
			if k == "epoch" || k == "step" {
				// trainer_state.json's own epoch and step are the
				// checkpoint's; the last log entry may be older (logged
				// at step 870 of a checkpoint at 872).
				continue
			}
			switch x := v.(type) {
			case float64, string, bool:
				rep.Scalars[k] = x
			}
		}
		if hs.GlobalStep != nil {
			rep.Scalars["step"] = *hs.GlobalStep
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		rep.invalid("read %s: %v", dir, err)
		return
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if entryIsRegular(dir, e) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	weights := 0
	for _, name := range names {
		p := filepath.Join(dir, name)
		f, size, err := openFile(p)
		if err != nil {
			rep.invalid("%v", err)
			continue
		}
		format := detectFile(f, size)
		f.Close()
		if format == "" {
			if strings.HasSuffix(name, ".index.json") {
				checkShardIndex(dir, p, rep)
			}
			continue
		}
		part, err := Inspect(p, opt)
		if err != nil {
			rep.invalid("%v", err)
			continue
		}
		rep.Parts = append(rep.Parts, part)
		rep.BytesRead += part.BytesRead
		if !part.Valid {
			rep.invalid("%s: %s", name, part.Reason)
		}
		if part.Layout == "state_dict" || part.Layout == "module" {
			weights++
		}
		for _, t := range part.Tensors {
			t.Path = name + ":" + t.Path
			if part.Layout == "optimizer" {
				t.Role = "optimizer"
			}
			rep.Tensors = append(rep.Tensors, t)
		}
		rep.StorageBytes += part.StorageBytes
		for _, g := range part.Globals {
			rep.addGlobal(g)
		}
	}
	if weights == 0 {
		rep.finding("no model weights file (model.safetensors, pytorch_model.bin) in the directory")
	}
}

// checkShardIndex checks that every shard a *.index.json names exists.
func checkShardIndex(dir, p string, rep *Report) {
	b, err := readBounded(p, maxSmallJSON)
	if err != nil {
		rep.invalid("%s: %v", filepath.Base(p), err)
		return
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		rep.invalid("%s: %v", filepath.Base(p), err)
		return
	}
	seen := map[string]bool{}
	for _, f := range idx.WeightMap {
		if seen[f] {
			continue
		}
		seen[f] = true
		if strings.Contains(f, "/") || !fileExists(filepath.Join(dir, f)) {
			rep.invalid("%s names shard %s, which is missing", filepath.Base(p), f)
		}
	}
}

// maxSmallJSON bounds the JSON files a checkpoint directory holds beside
// its weights (trainer_state.json, *.index.json), as maxDCPMetadata bounds
// .metadata: real ones are kilobytes to a few MiB (a long log_history, a
// weight map of a hundred thousand names).
const maxSmallJSON = 64 << 20

// readBounded reads a whole file of at most max bytes; a larger one (a
// sparse 1 GiB file costs nothing on disk) is refused by its size before
// anything is read.
func readBounded(p string, max int64) ([]byte, error) {
	f, size, err := openFile(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > max {
		return nil, fmt.Errorf("%d bytes, over the %d-byte bound for this file", size, max)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("read: %v", err)
	}
	return b, nil
}
