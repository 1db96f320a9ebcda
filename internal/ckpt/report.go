package ckpt

import (
	"encoding/json"
	"math"
	"sort"
	"time"
)

// Tensor is one tensor found in a checkpoint.
type Tensor struct {
	Path      string  `json:"path"`
	DType     string  `json:"dtype"`
	Shape     []int64 `json:"shape"`
	Bytes     int64   `json:"bytes"`
	Storage   string  `json:"storage,omitempty"` // storage key (torch) or "" (safetensors)
	Offset    int64   `json:"offset,omitempty"`  // in elements of the storage
	Parameter bool    `json:"parameter,omitempty"`
	Role      string  `json:"role,omitempty"` // "model", "optimizer", "" when unknown
}

// Storage is one storage record of a torch checkpoint.
type Storage struct {
	Key      string `json:"key"`
	DType    string `json:"dtype"`
	Numel    int64  `json:"numel"` // elements of DType, as the pickle says
	Bytes    int64  `json:"bytes"`
	Location string `json:"location,omitempty"`
}

// Estimate is the GPU memory a resume of this checkpoint needs, in bytes.
type Estimate struct {
	Parameters int64 `json:"parameters"`
	Gradients  int64 `json:"gradients"`
	Optimizer  int64 `json:"optimizer"`
	Buffers    int64 `json:"buffers"`
	Total      int64 `json:"total"`
}

// Report is what Inspect and Verify learn about one checkpoint.
type Report struct {
	Path         string    `json:"path"`
	Format       string    `json:"format"`
	Layout       string    `json:"layout,omitempty"` // "lightning", "hf-trainer", "state_dict", "training", "module"
	Valid        bool      `json:"valid"`
	Reason       string    `json:"reason,omitempty"`
	Size         int64     `json:"size"`
	ModTime      time.Time `json:"mtime"`
	Tensors      []Tensor  `json:"tensors"`
	Scalars      Scalars   `json:"scalars"`
	TensorBytes  int64     `json:"tensor_bytes"`
	StorageBytes int64     `json:"storage_bytes"`
	Parameters   int64     `json:"parameters"`
	Resume       Estimate  `json:"resume_estimate"`
	Globals      []string  `json:"globals"`
	Findings     []string  `json:"findings"`
	Storages     []Storage `json:"storages,omitempty"`
	Step         *int64    `json:"step,omitempty"`
	Epoch        *int64    `json:"epoch,omitempty"`
	// EpochValue is the epoch as recorded when it is a fraction (HF
	// Trainer: 0.96 of the first epoch); Epoch is its whole part.
	EpochValue *float64 `json:"epoch_value,omitempty"`
	// Run identifies the training run of an HF Trainer checkpoint (see
	// hfRunIdentity); checkpoints of different runs do not compare.
	Run string `json:"run,omitempty"`
	// Incomplete says what the checkpoint lacks for a resume ("" when
	// nothing: HF's optimizer.pt).
	Incomplete string    `json:"incomplete,omitempty"`
	Parts      []*Report `json:"parts,omitempty"` // files of a directory checkpoint
	BytesRead  int64     `json:"bytes_read"`
}

func (r *Report) invalid(format string, a ...any) {
	if r.Valid || r.Reason == "" {
		r.Reason = sprintf(format, a...)
	}
	r.Valid = false
}

func (r *Report) finding(format string, a ...any) {
	r.Findings = append(r.Findings, sprintf(format, a...))
}

func (r *Report) addGlobal(g string) {
	for _, o := range r.Globals {
		if o == g {
			return
		}
	}
	r.Globals = append(r.Globals, g)
}

func (r *Report) finish() {
	sort.Strings(r.Globals)
	if r.Tensors == nil {
		r.Tensors = []Tensor{}
	}
	if r.Scalars == nil {
		r.Scalars = map[string]any{}
	}
	if r.Globals == nil {
		r.Globals = []string{}
	}
	if r.Findings == nil {
		r.Findings = []string{}
	}
	r.TensorBytes, r.Parameters = 0, 0
	for _, t := range r.Tensors {
		r.TensorBytes += t.Bytes
	}
	if r.Step == nil {
		r.Step = scalarInt(r.Scalars, stepKeys...)
	}
	if r.Epoch == nil {
		r.Epoch = scalarInt(r.Scalars, epochKeys...)
	}
	r.estimate()
}

// stepKeys and epochKeys are the top-level keys a checkpoint's step and epoch
// are read from. Nested values are never used: an optimizer state_dict keeps
// a per-parameter "step" (state.0.step) that counts optimizer updates, and a
// config keeps totals ("epochs", "max_steps"), neither of which says where a
// checkpoint is in its run.
var (
	stepKeys  = []string{"global_step", "step", "iteration", "iter", "num_updates"}
	epochKeys = []string{"epoch", "current_epoch"}
)

// scalarInt finds the first of keys at the top level of scalars.
func scalarInt(sc map[string]any, keys ...string) *int64 {
	for _, k := range keys {
		if v, ok := asInt(sc[k]); ok {
			return &v
		}
	}
	return nil
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		if x == float64(int64(x)) {
			return int64(x), true
		}
	}
	return 0, false
}

// estimate sums what a resume puts on the GPU: the model's floating-point
// tensors as parameters (and as many bytes again for their gradients), its
// other tensors as buffers, and the optimizer state as stored. Activations
// and the allocator's cache come on top and are not estimated.
func (r *Report) estimate() {
	var e Estimate
	for _, t := range r.Tensors {
		switch {
		case t.Role == "optimizer":
			e.Optimizer += t.Bytes
		case isFloat(t.DType):
			e.Parameters += t.Bytes
			r.Parameters += numel(t.Shape)
		default:
			e.Buffers += t.Bytes
		}
	}
	e.Gradients = e.Parameters
	e.Total = e.Parameters + e.Gradients + e.Optimizer + e.Buffers
	r.Resume = e
}

func isFloat(dt string) bool {
	switch dt {
	case "float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32",
		"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz":
		return true
	}
	return false
}

func numel(shape []int64) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	return n
}

// Scalars are a checkpoint's scalar values by path. In JSON a float that
// JSON cannot hold (ReduceLROnPlateau's mode_worse is inf, a diverged
// loss nan) is the string Python's float() reads back: "inf", "-inf",
// "nan".
type Scalars map[string]any

// MarshalJSON writes s with non-finite floats as strings.
func (s Scalars) MarshalJSON() ([]byte, error) { return marshalFinite(s) }

// Metrics are an entry's numeric scalars; non-finite ones are written to
// JSON as Scalars writes them.
type Metrics map[string]float64

// MarshalJSON writes m with non-finite floats as strings.
func (m Metrics) MarshalJSON() ([]byte, error) { return marshalFinite(m) }

// marshalFinite writes m as a JSON object (null for nil) with non-finite
// floats as strings.
func marshalFinite[V any](m map[string]V) ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = finiteJSON(v)
	}
	return json.Marshal(out)
}

func finiteJSON(v any) any {
	switch x := v.(type) {
	case float64:
		return floatJSON(x)
	case float32:
		return floatJSON(float64(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = finiteJSON(e)
		}
		return out
	}
	return v
}

func floatJSON(f float64) any {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return f
}
