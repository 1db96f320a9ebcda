package ckpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// torchZipBytes builds a minimal torch-style archive whose pickle is
// {"step": step, "w": <float32 tensor of 2 elements>} (protocol 2): a
// checkpoint with model weights.
func torchZipBytes(t *testing.T, root string, step byte) []byte {
	t.Helper()
	return torchZipWith(t, root, []byte("X\x04\x00\x00\x00stepK"+string([]byte{step})), true)
}

// torchZipWith builds a torch-style archive whose pickle is a dict of the
// protocol-2 key/value opcodes in items, plus "w": a float32 tensor of two
// elements in storage record data/0 when weights is set.
func torchZipWith(t *testing.T, root string, items []byte, weights bool) []byte {
	t.Helper()
	var p bytes.Buffer
	p.WriteString("\x80\x02}(")
	p.Write(items)
	if weights {
		p.WriteString("X\x01\x00\x00\x00w" +
			"ctorch._utils\n_rebuild_tensor_v2\n(" +
			"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQ" +
			"K\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR")
	}
	p.WriteString("u.")
	members := []member{{root + "/data.pkl", p.Bytes()}, {root + "/version", []byte("3\n")}}
	if weights {
		members = append(members, member{root + "/data/0", make([]byte, 8)})
	}
	return zipOf(t, zip.Store, members...)
}

func safetensorsBytes(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func writeAt(t *testing.T, path string, data []byte, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestLatest(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	good := torchZipBytes(t, "archive", 20)
	st := safetensorsBytes(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8))
	tests := []struct {
		name        string
		files       map[string][]byte // path -> content, written in order with increasing mtime
		want        string            // base path of best, "" for none
		wantSkipped []string
	}{
		{
			name: "truncated newest torch zip is skipped",
			files: map[string][]byte{
				"a/step10.pt": torchZipBytes(t, "x", 10),
				"a/step20.pt": good,
				"a/step30.pt": good[:len(good)/2],
			},
			want: "a/step20.pt", wantSkipped: []string{"a/step30.pt"},
		},
		{
			name: "step beats mtime",
			files: map[string][]byte{
				"a.bin":   torchZipBytes(t, "anyroot", 50), // oldest mtime, highest step
				"b.pt":    torchZipBytes(t, "r", 5),
				"log.txt": []byte("epoch 7 loss 0.1\n"),
			},
			want: "a.bin",
		},
		{
			name: "safetensors header larger than file",
			files: map[string][]byte{
				"m1.safetensors": st,
				"m2.safetensors": st[:len(st)-3],
				"notes.json":     []byte(`{"epoch": 3}`),
			},
			want: "m1.safetensors", wantSkipped: []string{"m2.safetensors"},
		},
		{
			name: "dcp without .metadata",
			files: map[string][]byte{
				"ok.pt":                  good,
				"dcp/step9/__0_0.distcp": []byte("partial"),
			},
			want: "ok.pt", wantSkipped: []string{"dcp/step9"},
		},
		{
			name:        "nothing valid",
			files:       map[string][]byte{"x.pt": good[:60]},
			want:        "",
			wantSkipped: []string{"x.pt"},
		},
		{
			name:  "only non-checkpoints",
			files: map[string][]byte{"train.log": []byte("PK not really"), "cfg.yaml": []byte("lr: 1")},
			want:  "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// Files sorted by path get increasing modification times.
			for i, p := range sortedKeys(tc.files) {
				writeAt(t, filepath.Join(dir, p), tc.files[p], t0.Add(time.Duration(i)*time.Minute))
			}
			best, skipped, err := Latest(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if best != nil {
				got, _ = filepath.Rel(dir, best.Path)
			}
			if got != tc.want {
				t.Errorf("best = %q, want %q", got, tc.want)
			}
			var gotSkipped []string
			for _, s := range skipped {
				r, _ := filepath.Rel(dir, s.Path)
				gotSkipped = append(gotSkipped, r)
				if s.Reason == "" {
					t.Errorf("skipped %s has no reason", r)
				}
			}
			if len(gotSkipped) != len(tc.wantSkipped) {
				t.Fatalf("skipped = %v, want %v", gotSkipped, tc.wantSkipped)
			}
			for i := range gotSkipped {
				if gotSkipped[i] != tc.wantSkipped[i] {
					t.Errorf("skipped = %v, want %v", gotSkipped, tc.wantSkipped)
				}
			}
		})
	}
}

func TestLatestUnreadable(t *testing.T) {
	if _, _, err := Latest(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Latest on a missing dir: want an error")
	}
}

func TestInspectNotRegular(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Inspect(p, Options{}); err == nil {
		t.Fatal("Inspect on a FIFO: want an error")
	}
	if _, err := ScanPath(p); err == nil {
		t.Fatal("ScanPath on a FIFO: want an error")
	}
	es, err := Scan(filepath.Dir(p))
	if err != nil || len(es) != 0 {
		t.Fatalf("Scan over a FIFO: %v %v", es, err)
	}
}
