package ckpt

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
)

var fileFixtures = []string{
	"state_dict.pt", "training.pt", "legacy.pt", "dtypes.pt", "dtypes_legacy.pt", "views.pt", "nested.pt",
	"module.pt", "lightning.ckpt", "model.safetensors", "plain4.pkl", "plain0.pkl",
}

// TestTruncatedIsInvalid: every proper prefix of every fixture is reported
// invalid with a reason.
func TestTruncatedIsInvalid(t *testing.T) {
	for _, name := range fileFixtures {
		data, err := os.ReadFile(filepath.Join("testdata/torch", name))
		if err != nil {
			t.Fatal(err)
		}
		step := 1 + len(data)/300
		for n := 0; n < len(data); n += step {
			rep := InspectReader(bytes.NewReader(data[:n]), int64(n), Options{Structure: true})
			if rep.Valid || rep.Reason == "" {
				t.Fatalf("%s cut to %d of %d bytes: valid=%v reason=%q", name, n, len(data), rep.Valid, rep.Reason)
			}
		}
	}
}

// TestBitFlips: flipping any bit never crashes Inspect/Scan; a flip inside
// a torch storage record is caught by the deep CRC pass.
func TestBitFlips(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, name := range fileFixtures {
		data, _ := os.ReadFile(filepath.Join("testdata/torch", name))
		for i := 0; i < 100; i++ {
			b := append([]byte(nil), data...)
			b[r.Intn(len(b))] ^= 1 << r.Intn(8)
			InspectReader(bytes.NewReader(b), int64(len(b)), Options{Deep: true, Structure: true})
			res := &ScanResult{}
			scanReader(bytes.NewReader(b), int64(len(b)), res)
		}
	}
	// A flip inside any zip record's data must fail the deep pass.
	data, _ := os.ReadFile("testdata/torch/training.pt")
	a, err := ziparc.Open(bytes.NewReader(data), int64(len(data)), ziparc.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i := range a.Entries {
		e := &a.Entries[i]
		off, err := a.DataOffset(e)
		if err != nil {
			t.Fatal(err)
		}
		for k := int64(0); k < int64(e.Size); k += 1 + int64(e.Size)/5 {
			b := append([]byte(nil), data...)
			b[off+k] ^= 0x10
			deep := InspectReader(bytes.NewReader(b), int64(len(b)), Options{Deep: true, Structure: true})
			if deep.Valid {
				t.Errorf("flip in %s at +%d not detected by the deep pass", e.Name, k)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d flips checked", checked)
	}
}

func TestGarbageInputs(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	random := make([]byte, 4096)
	r.Read(random)
	tests := []struct {
		name   string
		data   []byte
		reason string
	}{
		{"empty", nil, "empty"},
		{"random", random, "not a checkpoint"},
		{"text", []byte("epoch 3 loss 0.25\nthis is a log line\n"), "not a checkpoint"},
		{"json", []byte(`{"epoch": 3}`), "not a checkpoint"},
		{"zip of logs", func() []byte {
			b, _ := os.ReadFile("testdata/torch/training.pt")
			return bytes.Replace(b, []byte("training/"), []byte("training_"), -1)
		}(), "not a checkpoint"},
		{"pickle magic only", []byte("\x80\x02"), "truncated"},
		{"safetensors bad json", safetensorsBytes(`{"a": nope}`, nil), "JSON"},
		{"safetensors overlap", safetensorsBytes(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, make([]byte, 6)), "overlap"},
		{"safetensors wrong size", safetensorsBytes(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 4)), "needs 16"},
		{"safetensors trailing", safetensorsBytes(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 9)), "file holds 9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := InspectReader(bytes.NewReader(tc.data), int64(len(tc.data)), Options{Deep: true, Structure: true})
			if rep.Valid {
				t.Fatalf("valid, want invalid")
			}
			if !strings.Contains(rep.Reason, tc.reason) {
				t.Errorf("reason %q lacks %q", rep.Reason, tc.reason)
			}
		})
	}
}

// TestTornDirectories: DCP without .metadata, and an HF directory whose
// weights are truncated, are invalid.
func TestTornDirectories(t *testing.T) {
	dir := t.TempDir()
	dcp := filepath.Join(dir, "dcp")
	os.MkdirAll(dcp, 0o755)
	b, _ := os.ReadFile("testdata/torch/dcp/step-300/__0_0.distcp")
	os.WriteFile(filepath.Join(dcp, "__0_0.distcp"), b, 0o644)
	os.WriteFile(filepath.Join(dcp, ".metadata.tmp"), []byte("partial"), 0o644)
	rep, err := Inspect(dcp, Options{Structure: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Valid || !strings.Contains(rep.Reason, ".metadata") {
		t.Errorf("dcp without .metadata: valid=%v reason=%q", rep.Valid, rep.Reason)
	}
	// .metadata present but the shard is cut short.
	m, _ := os.ReadFile("testdata/torch/dcp/step-300/.metadata")
	os.WriteFile(filepath.Join(dcp, ".metadata"), m, 0o644)
	os.WriteFile(filepath.Join(dcp, "__0_0.distcp"), b[:len(b)/2], 0o644)
	rep, _ = Inspect(dcp, Options{Structure: true})
	if rep.Valid || !strings.Contains(rep.Reason, "truncated") {
		t.Errorf("dcp short shard: valid=%v reason=%q", rep.Valid, rep.Reason)
	}
	hf := filepath.Join(dir, "checkpoint-10")
	os.MkdirAll(hf, 0o755)
	st, _ := os.ReadFile("testdata/torch/hf/checkpoint-500/model.safetensors")
	os.WriteFile(filepath.Join(hf, "model.safetensors"), st[:len(st)-10], 0o644)
	os.WriteFile(filepath.Join(hf, "trainer_state.json"), []byte(`{"global_step": 10, "epoch": 0.5}`), 0o644)
	rep, _ = Inspect(hf, Options{Structure: true})
	if rep.Valid || !strings.Contains(rep.Reason, "model.safetensors") {
		t.Errorf("hf truncated weights: valid=%v reason=%q", rep.Valid, rep.Reason)
	}
	os.WriteFile(filepath.Join(hf, "trainer_state.json"), []byte(`{"global_step": 1`), 0o644)
	rep, _ = Inspect(hf, Options{Structure: true})
	if rep.Valid || !strings.Contains(rep.Reason, "trainer_state.json") {
		t.Errorf("hf bad state: valid=%v reason=%q", rep.Valid, rep.Reason)
	}
}
