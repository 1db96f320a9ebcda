package ckpt

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/vramguard/vramguard/internal/pickle"
)

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }

// walkLimits bound the traversal of a decoded pickle, which may share
// subtrees through the memo (a DAG, even a cycle through a list).
const (
	maxWalkNodes = 2_000_000
	maxWalkDepth = 400
	maxScalars   = 20_000
)

func decodePickle(r io.ReaderAt, off, size int64) (*pickle.Result, error) {
	return pickle.Decode(r, off, size, pickle.DefaultLimits)
}

// storageRef is what a torch persistent id says about a storage.
type storageRef struct {
	key      string
	dtype    string
	location string
	numel    int64
	// legacy view storages: (view_key, offset, size)
	viewOf     string
	viewOffset int64
}

// walker turns a decoded torch pickle into tensors and scalars.
type walker struct {
	rep      *Report
	storages map[string]*storageRef
	order    []string
	nodes    int
	seen     map[any]bool
	walked   map[any]bool // containers walked once already (again)
	capped   bool
	// sharedNoted: the finding about shared containers is made.
	sharedNoted bool
	bad         []string // structural problems found while walking
}

func newWalker(rep *Report) *walker {
	return &walker{rep: rep, storages: map[string]*storageRef{}, seen: map[any]bool{}}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func (w *walker) scalar(path string, v any) {
	if len(w.rep.Scalars) >= maxScalars {
		if !w.capped {
			w.capped = true
			w.rep.finding("more than %d scalars; the rest are not listed", maxScalars)
		}
		return
	}
	if w.rep.Scalars == nil {
		w.rep.Scalars = map[string]any{}
	}
	if path == "" {
		path = "."
	}
	w.rep.Scalars[path] = v
}

// walk visits v at path; role is "optimizer" under an optimizer state dict.
func (w *walker) walk(v any, path string, depth int, role string) {
	w.nodes++
	if w.nodes > maxWalkNodes || depth > maxWalkDepth {
		if !w.capped {
			w.capped = true
			w.rep.finding("object tree too large or deep; traversal stopped at %s", path)
		}
		return
	}
	switch x := v.(type) {
	case int64, float64, bool, string:
		w.scalar(path, x)
	case pickle.BigInt:
		w.scalar(path, x.String())
	case pickle.None, pickle.Bytes, pickle.Global, nil:
	case pickle.Tuple:
		for i, e := range x {
			w.walk(e, join(path, fmt.Sprint(i)), depth+1, role)
		}
	case *pickle.List:
		if w.seen[x] || w.again(x, path) {
			return // a cycle, or walked already
		}
		w.seen[x] = true
		defer delete(w.seen, x)
		for i, e := range x.Items {
			w.walk(e, join(path, fmt.Sprint(i)), depth+1, role)
		}
	case *pickle.Dict:
		if w.seen[x] || w.again(x, path) {
			return
		}
		w.seen[x] = true
		defer delete(w.seen, x)
		w.walkDict(x, path, depth, role)
	case *pickle.Set:
		for i, e := range x.Items {
			w.walk(e, join(path, fmt.Sprint(i)), depth+1, role)
		}
	case *pickle.Call:
		if w.seen[x] {
			return
		}
		if g, ok := x.Global(); ok && g.Module == "collections" && g.Name == "OrderedDict" && w.again(x, path) {
			return
		}
		w.seen[x] = true
		defer delete(w.seen, x)
		w.walkCall(x, path, depth, role)
	}
}

// again reports whether the container c was walked already under another
// path. A pickle shares a memoized container by reference, and a chain of
// containers that each hold the one before twice doubles the paths at
// every level: a 1 KB pickle names 2^40 paths. Each container is walked
// once, under its first path, so the walk is linear in the pickle; a
// tensor shared by two paths (tied weights) is a Call, not a container,
// and is still listed under both.
func (w *walker) again(c any, path string) bool {
	if w.walked == nil {
		w.walked = map[any]bool{}
	}
	if !w.walked[c] {
		w.walked[c] = true
		return false
	}
	if !w.sharedNoted {
		w.sharedNoted = true
		w.rep.finding("containers shared by several paths (first at %s) are listed once, under their first path", path)
	}
	return true
}

// pathKey renders a dict key as a path element. A class used as a key
// (Lightning 1.x keys its callbacks' states by the callback's class) is
// its qualified name, as Python's repr names it, so two callbacks' states
// are told apart: callbacks.pytorch_lightning.callbacks.early_stopping.EarlyStopping.best_score.
func pathKey(k any) string { return pathKeyDepth(k, 0) }

func pathKeyDepth(k any, depth int) string {
	switch v := k.(type) {
	case pickle.Global:
		return v.String()
	case pickle.Tuple:
		if depth > 8 {
			return "..."
		}
		var b strings.Builder
		b.WriteString("(")
		for i, e := range v {
			if i > 0 {
				b.WriteString(",")
			}
			if i >= 16 {
				b.WriteString("...")
				break
			}
			b.WriteString(pathKeyDepth(e, depth+1))
		}
		b.WriteString(")")
		return b.String()
	case *pickle.Call:
		if g, ok := v.Global(); ok {
			return "<" + g.String() + " object>"
		}
		return "<object>"
	}
	return pickle.KeyString(k)
}

func (w *walker) walkDict(x *pickle.Dict, path string, depth int, role string) {
	if role == "" && isOptimizerState(x) {
		role = "optimizer"
	}
	for i := range x.Len() {
		v := x.Val(i)
		if _, none := v.(pickle.None); none && w.nodes < maxWalkNodes && depth < maxWalkDepth {
			w.nodes++ // a None names nothing: no path to make
			continue
		}
		w.walk(v, join(path, pathKey(x.Key(i))), depth+1, role)
	}
}

func isOptimizerState(d *pickle.Dict) bool {
	_, a := d.Get("state")
	_, b := d.Get("param_groups")
	return a && b
}

func (w *walker) walkCall(c *pickle.Call, path string, depth int, role string) {
	g, _ := c.Global()
	name := g.String()
	switch name {
	case "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_tensor",
		"torch._utils._rebuild_qtensor":
		w.tensor(c, path, name, role, false)
		return
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		if len(c.Args) > 0 {
			if inner, ok := c.Args[0].(*pickle.Call); ok {
				if ig, _ := inner.Global(); strings.HasPrefix(ig.String(), "torch._utils._rebuild_") {
					w.tensor(inner, path, ig.String(), role, true)
					return
				}
			}
			w.walk(c.Args[0], path, depth+1, role)
		}
		return
	case "torch._tensor._rebuild_from_type_v2", "torch._tensor._rebuild_from_type":
		// (func, new_type, args, state): the tensor is func(*args).
		if len(c.Args) >= 3 {
			if fn, ok := c.Args[0].(pickle.Global); ok {
				if args, ok := c.Args[2].(pickle.Tuple); ok {
					inner := &pickle.Call{Func: fn, Args: args}
					param := false
					if nt, ok := c.Args[1].(pickle.Global); ok && nt.Name == "Parameter" {
						param = true
					}
					w.tensor(inner, path, fn.String(), role, param)
					return
				}
			}
		}
	case "torch._utils._rebuild_meta_tensor_no_storage":
		// (dtype, size, stride, requires_grad): no data at all.
		if len(c.Args) >= 2 {
			dt, _ := dtypeOf(c.Args[0])
			shape, _ := intTuple(c.Args[1])
			w.rep.Tensors = append(w.rep.Tensors, Tensor{Path: path, DType: dt, Shape: shape, Role: role, Storage: "meta"})
		}
		return
	case "collections.OrderedDict", "builtins.dict", "__builtin__.dict", "collections.defaultdict":
		d := &pickle.Dict{}
		if c.DictItems != nil {
			d = c.DictItems
		}
		w.walkDict(d, path, depth, role)
		return
	case "torch.Size", "builtins.tuple", "builtins.list", "builtins.set", "builtins.frozenset":
		if len(c.Args) > 0 {
			w.walk(c.Args[0], path, depth+1, role)
		}
		for i, e := range c.ListItems {
			w.walk(e, join(path, fmt.Sprint(i)), depth+1, role)
		}
		return
	case "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct":
		w.numpyArray(c, path, role)
		return
	case "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar":
		w.numpyScalar(c, path)
		return
	case "torch._utils._rebuild_sparse_tensor", "torch._utils._rebuild_sparse_csr_tensor":
		for i, a := range c.Args {
			w.walk(a, join(path, fmt.Sprint(i)), depth+1, role)
		}
		return
	}
	// Any other object: a pickled nn.Module, a dataclass, a scheduler...
	// Its state holds what matters. Modules are flattened the way
	// state_dict() names things.
	if c.HasState {
		if st, ok := c.State.(*pickle.Dict); ok && isModuleState(st) {
			w.walkModule(st, path, depth, role)
			return
		}
		if st, ok := c.State.(pickle.Tuple); ok && len(st) == 2 {
			// (state, slotstate)
			w.walk(st[0], path, depth+1, role)
			w.walk(st[1], path, depth+1, role)
		} else {
			w.walk(c.State, path, depth+1, role)
		}
	}
	if len(c.Args) > 0 && !c.New {
		for i, a := range c.Args {
			if _, isG := a.(pickle.Global); isG {
				continue
			}
			w.walk(a, join(path, fmt.Sprint(i)), depth+1, role)
		}
	}
	for i, e := range c.ListItems {
		w.walk(e, join(path, fmt.Sprint(i)), depth+1, role)
	}
	if c.DictItems != nil {
		w.walkDict(c.DictItems, path, depth, role)
	}
}

func isModuleState(d *pickle.Dict) bool {
	_, a := d.Get("_parameters")
	_, b := d.Get("_modules")
	return a && b
}

// walkModule names a module's tensors as state_dict() would: parameters and
// buffers under their names, submodules under theirs.
func (w *walker) walkModule(st *pickle.Dict, path string, depth int, role string) {
	for _, field := range []string{"_parameters", "_buffers"} {
		v, _ := st.Get(field)
		if d := asDict(v); d != nil {
			for i := range d.Len() {
				w.walk(d.Val(i), join(path, pathKey(d.Key(i))), depth+1, role)
			}
		}
	}
	if v, ok := st.Get("_modules"); ok {
		if d := asDict(v); d != nil {
			for i := range d.Len() {
				k, child := d.Key(i), d.Val(i)
				if c, ok := child.(*pickle.Call); ok {
					if cs, ok := c.State.(*pickle.Dict); ok && isModuleState(cs) {
						w.walkModule(cs, join(path, pathKey(k)), depth+1, role)
						continue
					}
				}
				w.walk(child, join(path, pathKey(k)), depth+1, role)
			}
		}
	}
	// Plain attributes (ints, floats, strings) of the module are scalars.
	for i := range st.Len() {
		ks := pathKey(st.Key(i))
		if strings.HasPrefix(ks, "_") {
			continue
		}
		switch v := st.Val(i); v.(type) {
		case int64, float64, string:
			w.scalar(join(path, ks), v)
		}
	}
}

func asDict(v any) *pickle.Dict {
	switch x := v.(type) {
	case *pickle.Dict:
		return x
	case *pickle.Call:
		if x.DictItems != nil {
			return x.DictItems
		}
		if g, _ := x.Global(); g.Name == "OrderedDict" {
			return &pickle.Dict{}
		}
	}
	return nil
}

func intTuple(v any) ([]int64, bool) {
	if c, ok := v.(*pickle.Call); ok {
		if g, _ := c.Global(); g.Name == "Size" && len(c.Args) == 1 {
			v = c.Args[0]
		}
	}
	var items []any
	switch x := v.(type) {
	case pickle.Tuple:
		items = x
	case *pickle.List:
		items = x.Items
	default:
		return nil, false
	}
	out := make([]int64, len(items))
	for i, e := range items {
		n, ok := e.(int64)
		if !ok {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

func dtypeOf(v any) (string, bool) {
	g, ok := v.(pickle.Global)
	if !ok || g.Module != "torch" {
		return "", false
	}
	return torchDType(g.Name)
}

// storage resolves a torch persistent id into a storage reference.
func (w *walker) storage(v any) (*storageRef, error) {
	p, ok := v.(pickle.PersID)
	if !ok {
		return nil, fmt.Errorf("tensor storage is %T, not a persistent id", v)
	}
	t, ok := p.ID.(pickle.Tuple)
	if !ok || len(t) < 5 {
		return nil, fmt.Errorf("persistent id is not a storage tuple")
	}
	if s, _ := t[0].(string); s != "storage" {
		return nil, fmt.Errorf("persistent id of type %v", t[0])
	}
	cls, ok := t[1].(pickle.Global)
	if !ok {
		return nil, fmt.Errorf("storage type is %T", t[1])
	}
	dt, ok := dtypeFromStorageClass(cls.Name)
	if !ok {
		if d, ok2 := torchDType(cls.Name); ok2 { // some writers give the dtype itself
			dt = d
		} else {
			return nil, fmt.Errorf("unknown storage class %s", cls)
		}
	}
	key := pickle.KeyString(t[2])
	loc, _ := t[3].(string)
	numel, ok := t[4].(int64)
	if !ok || numel < 0 {
		return nil, fmt.Errorf("storage %s has size %v", key, t[4])
	}
	if _, ok := mulSize(numel, max(elemSize[dt], 1)); !ok {
		return nil, fmt.Errorf("storage %s of %d %s elements is more bytes than a 64-bit size holds", key, numel, dt)
	}
	ref := &storageRef{key: key, dtype: dt, location: loc, numel: numel}
	if len(t) >= 6 {
		if vm, ok := t[5].(pickle.Tuple); ok && len(vm) == 3 {
			// A legacy storage view: register the root it lives in too.
			if _, ok := w.storages[key]; !ok {
				w.storages[key] = &storageRef{key: key, dtype: dt, location: loc, numel: numel}
				w.order = append(w.order, key)
			}
			view := &storageRef{key: pickle.KeyString(vm[0]), dtype: dt, location: loc, viewOf: key}
			view.viewOffset, _ = vm[1].(int64)
			view.numel, _ = vm[2].(int64)
			if end, ok := addSize(view.viewOffset, view.numel); !ok || end > numel {
				w.bad = append(w.bad, fmt.Sprintf("storage view %s [%d, +%d] runs past storage %s of %d elements", view.key, view.viewOffset, view.numel, key, numel))
			}
			ref = view
		}
	}
	if old, ok := w.storages[ref.key]; ok {
		if old.dtype != ref.dtype && ref.dtype != "uint8" && old.dtype != "uint8" {
			w.bad = append(w.bad, fmt.Sprintf("storage %s is referenced as %s and as %s", ref.key, old.dtype, ref.dtype))
		}
		return old, nil
	}
	w.storages[ref.key] = ref
	w.order = append(w.order, ref.key)
	return ref, nil
}

func (w *walker) tensor(c *pickle.Call, path, fn, role string, param bool) {
	a := c.Args
	if len(a) < 4 {
		w.bad = append(w.bad, fmt.Sprintf("%s: %s with %d arguments", path, fn, len(a)))
		return
	}
	st, err := w.storage(a[0])
	if err != nil {
		w.bad = append(w.bad, fmt.Sprintf("%s: %v", path, err))
		return
	}
	off, _ := a[1].(int64)
	shape, ok1 := intTuple(a[2])
	stride, ok2 := intTuple(a[3])
	if !ok1 || !ok2 || len(shape) != len(stride) {
		w.bad = append(w.bad, fmt.Sprintf("%s: malformed size/stride", path))
		return
	}
	dt := st.dtype
	if fn == "torch._utils._rebuild_tensor_v3" && len(a) >= 7 {
		if d, ok := dtypeOf(a[6]); ok {
			dt = d
		}
	}
	es := elemSize[dt]
	numel := int64(1)
	extent := int64(1) // elements the view touches: 1 + sum((n-1)*stride)
	for i, n := range shape {
		if n < 0 || stride[i] < 0 {
			w.bad = append(w.bad, fmt.Sprintf("%s: negative size or stride", path))
			return
		}
		if n == 0 {
			numel, extent = 0, 0
			break
		}
		if numel > 1<<50/n {
			w.bad = append(w.bad, fmt.Sprintf("%s: shape %v overflows", path, shape))
			return
		}
		numel *= n
		step, ok := mulSize(n-1, stride[i])
		if ok {
			extent, ok = addSize(extent, step)
		}
		if !ok {
			w.bad = append(w.bad, fmt.Sprintf("%s: shape %v with strides %v reaches past any 64-bit offset", path, shape, stride))
			return
		}
	}
	if off < 0 {
		w.bad = append(w.bad, fmt.Sprintf("%s: negative storage offset", path))
		return
	}
	// Storage numel is in elements of the storage's own dtype; convert for v3
	// (untyped storages count bytes).
	storElems := st.numel
	if sb := elemSize[st.dtype]; sb != es && es > 0 {
		storElems = st.numel * sb / es
	}
	// Sub-byte quantized types pack several elements per storage byte.
	switch dt {
	case "quint4x2":
		storElems, _ = mulSize(storElems, 2)
	case "quint2x4":
		storElems, _ = mulSize(storElems, 4)
	}
	if end, ok := addSize(off, extent); numel > 0 && (!ok || end > storElems) {
		w.bad = append(w.bad, fmt.Sprintf("%s: view [offset %d, extent %d] runs past its storage %s of %d elements", path, off, extent, st.key, storElems))
	}
	if role == "" {
		role = "model"
	}
	w.rep.Tensors = append(w.rep.Tensors, Tensor{
		Path: path, DType: dt, Shape: shape, Bytes: numel * es, Storage: st.key, Offset: off, Parameter: param, Role: role,
	})
}

// numpyArray reads numpy's _reconstruct + BUILD state:
// (version, shape, dtype, is_fortran, rawdata).
func (w *walker) numpyArray(c *pickle.Call, path, role string) {
	st, ok := c.State.(pickle.Tuple)
	if !ok || len(st) < 5 {
		return
	}
	shape, _ := intTuple(st[1])
	dt := ""
	if dc, ok := st[2].(*pickle.Call); ok && len(dc.Args) > 0 {
		if code, ok := dc.Args[0].(string); ok {
			dt, _ = numpyDType(code)
		}
	}
	n, ok := shapeNumel(shape)
	bytes, ok2 := mulSize(n, elemSize[dt])
	if !ok || !ok2 {
		w.bad = append(w.bad, fmt.Sprintf("%s: numpy array of shape %v is more bytes than a 64-bit size holds", path, shape))
		return
	}
	if role == "" {
		role = "model"
	}
	w.rep.Tensors = append(w.rep.Tensors, Tensor{Path: path, DType: dt, Shape: shape, Bytes: bytes, Storage: "numpy", Role: role})
}

// numpyScalar decodes numpy.core.multiarray.scalar(dtype, bytes) for the
// common int and float types, so metrics saved as numpy scalars show up.
func (w *walker) numpyScalar(c *pickle.Call, path string) {
	if len(c.Args) < 2 {
		return
	}
	dc, ok := c.Args[0].(*pickle.Call)
	if !ok || len(dc.Args) == 0 {
		return
	}
	code, _ := dc.Args[0].(string)
	dt, _ := numpyDType(code)
	var raw []byte
	switch b := c.Args[1].(type) {
	case pickle.Bytes:
		raw = b
	case string: // protocol 2 bytes come through latin-1
		raw = latin1Bytes(b)
	case *pickle.Call: // protocol 2: _codecs.encode(str, "latin1")
		if g, _ := b.Global(); g.Name == "encode" && len(b.Args) > 0 {
			if s, ok := b.Args[0].(string); ok {
				raw = latin1Bytes(s)
			}
		}
	}
	if v, ok := decodeScalar(dt, raw); ok {
		w.scalar(path, v)
	}
}

func latin1Bytes(s string) []byte {
	var out []byte
	for _, r := range s {
		out = append(out, byte(r))
	}
	return out
}

func decodeScalar(dt string, b []byte) (any, bool) {
	if int64(len(b)) != elemSize[dt] || len(b) == 0 {
		return nil, false
	}
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	switch dt {
	case "float64":
		return math.Float64frombits(u), true
	case "float32":
		return float64(math.Float32frombits(uint32(u))), true
	case "int64":
		return int64(u), true
	case "int32":
		return int64(int32(u)), true
	case "int16":
		return int64(int16(u)), true
	case "int8":
		return int64(int8(u)), true
	case "uint8", "uint16", "uint32":
		return int64(u), true
	case "bool":
		return u != 0, true
	}
	return nil, false
}
