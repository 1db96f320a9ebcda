package ckpt

import (
	"bytes"
	"testing"
)

// FuzzSafetensors: any input parses or fails with an error; a header that
// parses only describes bytes inside the input.
func FuzzSafetensors(f *testing.F) {
	f.Add(safetensorsBytes(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(safetensorsBytes(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},"b":{"dtype":"I64","shape":[],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add(safetensorsBytes(`{}`, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseSafetensors(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, tn := range h.Tensors {
			if 8+h.HeaderLen+tn.Offset+tn.Bytes > int64(len(b)) {
				t.Fatalf("tensor %s ends past the input", tn.Path)
			}
		}
		// The whole inspection path must not panic either.
		InspectReader(bytes.NewReader(b), int64(len(b)), Options{Deep: true})
	})
}
