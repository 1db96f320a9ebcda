package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
)

// maxSafetensorsHeader is the limit the reference implementation uses.
const maxSafetensorsHeader = 100 << 20

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
		return nil, fmt.Errorf("header length %d is over the %d-byte limit", n, maxSafetensorsHeader)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file: truncated", n, size)
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 8); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	buf = bytes.TrimRight(buf, " ") // the format pads with spaces
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(buf))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %v", err)
	}
	h := &SafetensorsHeader{HeaderLen: int64(n)}
	dataLen := size - 8 - int64(n)
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		msg := raw[name]
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__ is not a string map: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("tensor %q: %v", name, err)
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
		numel := int64(1)
		for _, s := range e.Shape {
			if s < 0 || (s > 0 && numel > math.MaxInt64/16/s) {
				return nil, fmt.Errorf("tensor %q: bad shape %v", name, e.Shape)
			}
			numel *= s
		}
		want := numel * elemSize[dt]
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
