package ckpt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// expectedFixture is what scripts/gen-ckpt-fixtures.py records from torch.
type expectedFixture struct {
	Format       string         `json:"format"`
	Layout       string         `json:"layout"`
	Tensors      []Tensor       `json:"tensors"`
	Scalars      map[string]any `json:"scalars"`
	StorageBytes *int64         `json:"storage_bytes"`
	Step         *int64         `json:"step"`
	Epoch        *int64         `json:"epoch"`
}

func loadExpected(t *testing.T) map[string]expectedFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/torch/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]expectedFixture
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) < 12 {
		t.Fatalf("expected.json lists %d fixtures", len(m))
	}
	return m
}

func tensorKey(t Tensor) string {
	return fmt.Sprintf("%s %s %v %d", t.Path, t.DType, t.Shape, t.Bytes)
}

// TestFixturesMatchTorch compares what Inspect reads with what torch.load
// saw for every fixture written by real PyTorch.
func TestFixturesMatchTorch(t *testing.T) {
	for name, want := range loadExpected(t) {
		t.Run(name, func(t *testing.T) {
			rep, err := Inspect(filepath.Join("testdata/torch", name), Options{Deep: true, Structure: true})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Valid {
				t.Fatalf("invalid: %s", rep.Reason)
			}
			if rep.Format != want.Format {
				t.Errorf("format = %q, want %q", rep.Format, want.Format)
			}
			if want.Layout != "" && rep.Layout != want.Layout {
				t.Errorf("layout = %q, want %q", rep.Layout, want.Layout)
			}
			if want.Tensors != nil {
				var got, exp []string
				for _, x := range rep.Tensors {
					got = append(got, tensorKey(x))
				}
				for _, x := range want.Tensors {
					if x.Shape == nil {
						x.Shape = []int64{}
					}
					exp = append(exp, tensorKey(x))
				}
				sort.Strings(got)
				sort.Strings(exp)
				if fmt.Sprint(got) != fmt.Sprint(exp) {
					t.Errorf("tensors differ\n got: %q\nwant: %q", got, exp)
				}
			}
			if want.StorageBytes != nil && rep.StorageBytes != *want.StorageBytes {
				t.Errorf("storage_bytes = %d, want %d", rep.StorageBytes, *want.StorageBytes)
			}
			for k, v := range want.Scalars {
				g, ok := rep.Scalars[k]
				if !ok {
					t.Errorf("scalar %q missing (want %v)", k, v)
					continue
				}
				if fmt.Sprint(normNum(g)) != fmt.Sprint(normNum(v)) {
					t.Errorf("scalar %q = %v, want %v", k, g, v)
				}
			}
			if want.Step != nil && (rep.Step == nil || *rep.Step != *want.Step) {
				t.Errorf("step = %v, want %d", rep.Step, *want.Step)
			}
			if want.Epoch != nil && (rep.Epoch == nil || *rep.Epoch != *want.Epoch) {
				t.Errorf("epoch = %v, want %d", rep.Epoch, *want.Epoch)
			}
		})
	}
}

func normNum(v any) any {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case int:
		return float64(x)
	}
	return v
}
