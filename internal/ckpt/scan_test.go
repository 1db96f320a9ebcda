package ckpt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// marker is the file every payload in testdata/malicious would create.
const marker = "/tmp/vramguard-ckpt-fixture-pwned"

func TestScanMalicious(t *testing.T) {
	os.Remove(marker)
	tests := []struct {
		file string
		want string // a global that must be reported dangerous
	}{
		{"os_system.pkl", "posix.system"},
		{"eval_p4.pkl", "builtins.eval"},
		{"popen_p0.pkl", "commands.Popen"}, // protocol 0 writes the Python 2 name,
		{"exec_p5.pkl", "builtins.exec"},
		{"memo_stack_global.pkl", "os.system"},
		{"getattr_import.pkl", "builtins.getattr"},
		{"getattr_import.pkl", "builtins.__import__"},
		{"second_pickle.pkl", "posix.system"},
		{"broken_after.pkl", "posix.system"},
		{"unresolvable.pkl", "<int64>.<int64>"},
		{"runpy.pkl", "runpy._run_code"},
		{"pydoc_locate.pkl", "pydoc.locate"},
		{"operator_attrgetter.pkl", "_operator.attrgetter"},
		{"torch_hub_load.pkl", "torch.hub.load"},
		{"bdb_run.pkl", "bdb.Bdb"},
		{"ext_registry.pkl", "<extension registry>.1"},
		{"posix_nt.pkl", "posix.system"},
		{"torch_payload.safetensors", "posix.system"},
		{"torch_payload_badcrc.pt", "posix.system"},
	}
	for _, tc := range tests {
		t.Run(tc.file+"/"+tc.want, func(t *testing.T) {
			p := filepath.Join("testdata/malicious", tc.file)
			res, err := ScanFile(p)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, h := range res.Hits {
				if strings.Trim(h.Global, `"`) == tc.want || h.Global == tc.want {
					found = h.Verdict == VerdictDangerous
					if !found {
						t.Errorf("%s is %s, want dangerous", h.Global, h.Verdict)
					}
				}
			}
			if !found {
				t.Errorf("%s not reported dangerous; hits: %+v", tc.want, res.Hits)
			}
			if res.Dangerous == 0 {
				t.Error("Dangerous count is 0")
			}
			// Inspect and Verify must not run anything either.
			if _, err := Inspect(p, Options{Deep: true, Structure: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("%s exists: a payload ran", marker)
	}
}

func TestScanBenign(t *testing.T) {
	for _, p := range []string{"testdata/malicious/benign.pt", "testdata/torch/training.pt", "testdata/torch/legacy.pt",
		"testdata/torch/dtypes.pt", "testdata/torch/numpy.pt", "testdata/torch/model.safetensors", "testdata/torch/lightning.ckpt", "testdata/torch/plain0.pkl"} {
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Dangerous != 0 || res.Unknown != 0 {
			t.Errorf("%s: %d dangerous, %d unknown: %+v", p, res.Dangerous, res.Unknown, res.Hits)
		}
	}
	// A whole pickled module names its own classes: unknown, not dangerous.
	res, err := ScanFile("testdata/torch/module.pt")
	if err != nil {
		t.Fatal(err)
	}
	if res.Dangerous != 0 || res.Unknown == 0 {
		t.Errorf("module.pt: %d dangerous, %d unknown, want 0 and >0: %+v", res.Dangerous, res.Unknown, res.Hits)
	}
}
