package ckpt

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// maxSafetensorsHeader is the limit the reference implementation uses.
const maxSafetensorsHeader = 100 << 20

// maxSafetensorsTensors bounds the tensors one header may list, and
// maxSafetensorsValue the bytes of one value in it (a tensor's entry, the
// __metadata__ map): a 100 MiB header of zero-size tensors or of one
// metadata string is refused at the bound, in bounded time and memory.
const (
	maxSafetensorsTensors = 1 << 16
	maxSafetensorsValue   = 1 << 20
)

// valueBudget is the header's reader: it fails once one value (the bytes
// read since reset) passes max, so json.Decoder never buffers more.
type valueBudget struct {
	r    *bufio.Reader
	n    int64
	max  int64
	over bool
}

var errValueBudget = errors.New("value over budget")

func (v *valueBudget) Read(p []byte) (int, error) {
	if v.n >= v.max {
		v.over = true
		return 0, errValueBudget
	}
	if int64(len(p)) > v.max-v.n {
		p = p[:v.max-v.n]
	}
	k, err := v.r.Read(p)
	v.n += int64(k)
	return k, err
}

func (v *valueBudget) reset() { v.n = 0 }

// why names a decode error, the budget's in words.
func (v *valueBudget) why(err error) error {
	if v.over || errors.Is(err, errValueBudget) {
		return fmt.Errorf("one value is over the reader's %d-byte bound", v.max)
	}
	return err
}

type stEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// SafetensorsHeader is a parsed safetensors header.
type SafetensorsHeader struct {
	HeaderLen int64
	Metadata  map[string]string
	Tensors   []Tensor
	// DataLen is the byte length the header's offsets cover.
	DataLen int64
	ranges  [][2]int64
}

// ParseSafetensors parses and checks a safetensors header against the file
// length: every tensor's byte range matches its dtype and shape, lies inside
// the data section, and the ranges tile it without gaps or overlaps.
func ParseSafetensors(r io.ReaderAt, size int64) (*SafetensorsHeader, error) {
	if size < 8 {
		return nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > maxSafetensorsHeader {
		return nil, fmt.Errorf("header length %d is over the format's limit of %d bytes (100 MiB): safetensors refuses it (HeaderTooLarge); the file is not truncated", n, maxSafetensorsHeader)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file: truncated", n, size)
	}
	// The header is streamed, never held whole: a 100 MiB header costs a
	// 64 KiB buffer, each value is bounded (valueBudget) and so is the
	// number of tensors, so the cost is bounded by the input's structure
	// and not its length.
	body := io.NewSectionReader(r, 8, int64(n))
	budget := &valueBudget{r: bufio.NewReaderSize(body, 64<<10), max: maxSafetensorsValue}
	dec := json.NewDecoder(budget)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("header is not a JSON object: %v", budget.why(err))
	}
	h := &SafetensorsHeader{HeaderLen: int64(n)}
	dataLen := size - 8 - int64(n)
	seen := map[string]bool{}
	for dec.More() {
		budget.reset()
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("header is not a JSON object: %v", budget.why(err))
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, fmt.Errorf("tensor %q is named twice", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&h.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__ is not a string map: %v", budget.why(err))
			}
			continue
		}
		if len(h.Tensors) >= maxSafetensorsTensors {
			return nil, fmt.Errorf("header lists more than %d tensors, over the reader's bound (real checkpoints hold a few thousand)", maxSafetensorsTensors)
		}
		var e stEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("header is not a JSON object of tensor entries: tensor %q: %v", name, budget.why(err))
		}
		dt, ok := safetensorsDType[e.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %q: unknown dtype %q", name, e.DType)
		}
		if len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("tensor %q: data_offsets has %d values", name, len(e.DataOffsets))
		}
		b, en := e.DataOffsets[0], e.DataOffsets[1]
		if b < 0 || en < b {
			return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] are not ordered", name, b, en)
		}
		numel, ok := shapeNumel(e.Shape)
		want, ok2 := mulSize(numel, elemSize[dt])
		if !ok || !ok2 {
			return nil, fmt.Errorf("tensor %q: bad shape %v", name, e.Shape)
		}
		if en-b != want {
			return nil, fmt.Errorf("tensor %q: %d bytes in data_offsets, shape %v of %s needs %d", name, en-b, e.Shape, dt, want)
		}
		if en > dataLen {
			return nil, fmt.Errorf("tensor %q: bytes [%d, %d) run past the %d-byte data section: truncated", name, b, en, dataLen)
		}
		shape := e.Shape
		if shape == nil {
			shape = []int64{}
		}
		h.Tensors = append(h.Tensors, Tensor{Path: name, DType: dt, Shape: shape, Bytes: want, Offset: b, Role: "model"})
		h.ranges = append(h.ranges, [2]int64{b, en})
	}
	budget.reset()
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %v", budget.why(err))
	}
	// What follows the object must be the format's space padding (JSON
	// whitespace, as the reference parser accepts), read in chunks.
	rest := io.MultiReader(dec.Buffered(), budget.r)
	chunk := make([]byte, 64<<10)
	for {
		k, err := rest.Read(chunk)
		for _, c := range chunk[:k] {
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return nil, fmt.Errorf("header has %q after its JSON object", c)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read header: %w", err)
		}
	}
	sort.Slice(h.Tensors, func(i, j int) bool { return h.Tensors[i].Path < h.Tensors[j].Path })
	sort.Slice(h.ranges, func(i, j int) bool { return h.ranges[i][0] < h.ranges[j][0] })
	var end int64
	for _, rg := range h.ranges {
		if rg[0] != end {
			if rg[0] < end {
				return nil, fmt.Errorf("tensor byte ranges overlap at %d", rg[0])
			}
			return nil, fmt.Errorf("gap in the data section at bytes [%d, %d)", end, rg[0])
		}
		end = rg[1]
	}
	h.DataLen = end
	if end != dataLen {
		return nil, fmt.Errorf("header describes %d data bytes, the file holds %d", end, dataLen)
	}
	return h, nil
}

func inspectSafetensors(r io.ReaderAt, size int64, rep *Report, opt Options) {
	h, err := ParseSafetensors(r, size)
	if err != nil {
		rep.invalid("safetensors: %v", err)
		return
	}
	rep.Tensors = h.Tensors
	rep.StorageBytes = h.DataLen
	rep.Layout = "state_dict"
	for k, v := range h.Metadata {
		if rep.Scalars == nil {
			rep.Scalars = map[string]any{}
		}
		rep.Scalars["__metadata__."+k] = v
	}
	if opt.Deep {
		if err := readAll(r, 8+h.HeaderLen, h.DataLen, opt.Progress); err != nil {
			rep.invalid("safetensors data: %v", err)
		}
	}
}
