package ckpt

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/pickle"
	"github.com/vramguard/vramguard/internal/testbin"
)

// TestScanFrameworkTierRealFiles: the 15 real benign files that named
// framework classes (HF training_args.bin, Lightning 2.4's optimizer class
// in hyper_parameters, Lightning 1.x's class-keyed callbacks,
// argparse.Namespace) pass in the framework tier, each such global named;
// --strict fails them.
func TestScanFrameworkTierRealFiles(t *testing.T) {
	t.Parallel()
	want := map[string][]string{} // file -> framework globals
	ta := []string{"transformers.training_args.TrainingArguments", "transformers.trainer_utils.IntervalStrategy",
		"transformers.trainer_utils.SchedulerType", "transformers.trainer_pt_utils.AcceleratorConfig",
		"transformers.training_args.OptimizerNames", "transformers.trainer_utils.HubStrategy",
		"accelerate.state.PartialState", "accelerate.utils.dataclasses.DistributedType"}
	for _, n := range []string{"500", "872", "1000", "1500", "7000", "7500"} {
		want["checkpoints/hf-trainer-mixed-runs/results/checkpoint-"+n+"/training_args.bin"] = ta
	}
	for _, n := range []string{"epoch=70-step=4331.ckpt", "epoch=84-step=5185.ckpt", "epoch=98-step=6039.ckpt", "last.ckpt"} {
		want["checkpoints/lightning-2.4-run/lightning_logs/version_0/checkpoints/"+n] = []string{"torch.optim.adam.Adam"}
	}
	mc := "pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint"
	want["checkpoints/lightning-1.3/last.ckpt"] = []string{mc}
	want["checkpoints/lightning-1.3/temp_training_checkpoints/last.ckpt"] = []string{mc}
	want["checkpoints/lightning-1.3/temp_training_checkpoints/CHIRAL1-v1.ckpt"] = []string{mc}
	want["checkpoints/lightning-1.4/last.ckpt"] = []string{"pytorch_lightning.callbacks.early_stopping.EarlyStopping", mc}
	want["checkpoints/lightning-argparse/DeepONet-RD-epoch=2953-val_loss=0.00.ckpt"] = []string{"argparse.Namespace"}
	if len(want) != 15 {
		t.Fatalf("%d files, want 15", len(want))
	}
	for name, globals := range want {
		p := testbin.CorpusFile(t, name)
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range res.Hits {
			if h.Verdict == VerdictFramework {
				got = append(got, h.Global)
			}
		}
		if res.Status != StatusFramework || !res.Safe || res.Framework != len(globals) || strings.Join(got, ",") != strings.Join(globals, ",") {
			t.Errorf("%s: status %s safe %v framework %v; want framework tier for %v", name, res.Status, res.Safe, got, globals)
		}
		strict, err := ScanFileWith(p, ScanOptions{Strict: true})
		if err != nil {
			t.Fatal(err)
		}
		if strict.Safe {
			t.Errorf("%s: safe under --strict", name)
		}
	}
}

// TestScanFrameworkTierRefuses: the tier is for inert uses only. A
// framework class that is called (also when the call's result is dropped),
// handed to anything that may call it, BUILT on, or a data class built
// another way stays unknown (or dangerous).
func TestScanFrameworkTierRefuses(t *testing.T) {
	t.Parallel()
	const adam = "ctorch.optim.adam\nAdam\n"
	const ns = "cargparse\nNamespace\n"
	const od = "ccollections\nOrderedDict\n"
	cases := []struct {
		name, pickle string
		verdict      string // of the first global that is not OrderedDict
	}{
		{"referenced in a dict", "\x80\x02}(X\x03\x00\x00\x00opt" + adam + "u.", VerdictFramework},
		{"referenced in an OrderedDict", "\x80\x02" + od + "((X\x03\x00\x00\x00opt" + adam + "tl\x85R.", VerdictFramework},
		{"called", "\x80\x02" + adam + "(]tR.", VerdictUnknown},
		{"called, the result dropped", "\x80\x02" + adam + ")R0N.", VerdictUnknown},
		{"handed to defaultdict", "\x80\x02ccollections\ndefaultdict\n" + adam + "\x85R.", VerdictUnknown},
		{"BUILD on the class", "\x80\x02" + adam + "}b.", VerdictUnknown}, // and the BUILD is dangerous
		{"Namespace built plainly", "\x80\x02" + ns + ")\x81}(X\x01\x00\x00\x00aK\x01ub.", VerdictFramework},
		{"Namespace called with arguments", "\x80\x02" + ns + "(K\x01t\x81.", VerdictUnknown},
		{"Namespace by REDUCE", "\x80\x02" + ns + ")R.", VerdictUnknown},
		{"Namespace with a state that is no dict", "\x80\x02" + ns + ")\x81]b.", VerdictUnknown},
		{"enum by value", "\x80\x02ctransformers.trainer_utils\nIntervalStrategy\nX\x05\x00\x00\x00steps\x85R.", VerdictFramework},
		{"enum with a dict", "\x80\x02ctransformers.trainer_utils\nIntervalStrategy\n}\x85R.", VerdictUnknown},
		{"not a framework module", "\x80\x02}(X\x01\x00\x00\x00kcmypkg\nThing\nu.", VerdictUnknown},
		{"a private framework module", "\x80\x02}(X\x01\x00\x00\x00kctorch._classes\nThing\nu.", VerdictUnknown},
		{"a framework module whose import runs more", "\x80\x02}(X\x01\x00\x00\x00kctorch.testing._internal.common_utils\nTestCase\nu.", VerdictUnknown},
		{"a framework __main__", "\x80\x02}(X\x01\x00\x00\x00kctransformers.__main__\nmain\nu.", VerdictUnknown},
	}
	for _, tc := range cases {
		p := filepath.Join(t.TempDir(), "x.pkl")
		if err := os.WriteFile(p, []byte(tc.pickle), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Errors) > 0 {
			t.Errorf("%s: decode errors %q", tc.name, res.Errors)
			continue
		}
		var got *ScanHit
		for i := range res.Hits {
			if res.Hits[i].Global != "collections.OrderedDict" && res.Hits[i].Global != "collections.defaultdict" {
				got = &res.Hits[i]
				break
			}
		}
		if got == nil || got.Verdict != tc.verdict {
			t.Errorf("%s: hits %+v; want the first %s", tc.name, res.Hits, tc.verdict)
		}
		if (tc.verdict == VerdictFramework) != res.Safe {
			t.Errorf("%s: safe %v, status %s", tc.name, res.Safe, res.Status)
		}
	}
	// The decoder's call list is what catches a dropped call.
	pr, err := pickle.DecodeBytes([]byte("\x80\x02"+adam+")R0N."), pickle.DefaultLimits)
	if err != nil || len(pr.Calls) != 1 {
		t.Fatalf("calls %v, %v", pr, err)
	}
}

// standinUnpickler is CPython's own unpickler with every global that is
// not a tensor rebuild or OrderedDict replaced by a stand-in class that
// records how the pickle uses it: called (REDUCE: "call" and the argument
// count), cls.__new__ (NEWOBJ: "new"), __setstate__ (BUILD: "setstate"
// and the state's type).
const standinUnpickler = `import collections, json, pickle, sys, zipfile

calls = {}
class Meta(type):
    def __call__(cls, *a, **k):
        calls.setdefault(cls._name, []).append(["call", len(a)])
        return object.__new__(cls)
def standin(name):
    def new(cls, *a, **k):
        calls.setdefault(name, []).append(["new", len(a)])
        return object.__new__(cls)
    def setstate(self, st):
        calls.setdefault(name, []).append(["setstate", type(st).__name__])
    return Meta(name, (), {"_name": name, "__new__": new, "__setstate__": setstate})
class U(pickle.Unpickler):
    def find_class(self, m, n):
        full = m + "." + n
        if full == "collections.OrderedDict":
            return collections.OrderedDict
        if m.startswith("torch._utils") or full.endswith("Storage"):
            return lambda *a: None
        calls.setdefault(full, [])
        return standin(full)
    def persistent_load(self, pid):
        return None
out = {}
for path in sys.argv[1:]:
    calls = {}
    z = zipfile.ZipFile(path)
    name = [x for x in z.namelist() if x.endswith("data.pkl")][0]
    U(z.open(name)).load()
    out[path] = calls
print(json.dumps(out))
`

// TestFrameworkTierAsPython: what the framework tier concludes of each of
// the 15 real files, CPython's unpickler confirms: a global the scan says
// is only referenced is never called, built or set; a data class is only
// made by cls.__new__(cls) and a dict of attributes, an enum only called
// with one value.
func TestFrameworkTierAsPython(t *testing.T) {
	t.Parallel()
	testbin.Need(t, testbin.NumPy) // (any Debian Python package brings /usr/bin/python3)
	root := testbin.Corpora(t)
	var files []string
	for _, dir := range []string{"checkpoints/hf-trainer-mixed-runs", "checkpoints/lightning-1.3", "checkpoints/lightning-1.4", "checkpoints/lightning-2.4-run", "checkpoints/lightning-argparse"} {
		filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && (strings.HasSuffix(p, ".ckpt") || strings.HasSuffix(p, "training_args.bin")) {
				files = append(files, p)
			}
			return nil
		})
	}
	if len(files) != 15 {
		t.Fatalf("%d files, want 15", len(files))
	}
	out, err := exec.Command("/usr/bin/python3", append([]string{"-c", standinUnpickler}, files...)...).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var uses map[string]map[string][][2]any
	if err := json.Unmarshal(out, &uses); err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, h := range res.Hits {
			if h.Verdict != VerdictFramework {
				continue
			}
			n++
			got, seen := uses[p][h.Global]
			if !seen {
				t.Errorf("%s: CPython never imports %s", p, h.Global)
				continue
			}
			for _, u := range got {
				kind, arg := u[0], u[1]
				ok := false
				switch shape := dataClasses[h.Global]; {
				case strings.Contains(h.Reason, "only references"), shape == shapeNone:
					ok = false // referenced only: no use at all
				case shape == shapeNew:
					ok = (kind == "new" && arg == 0.0) || (kind == "setstate" && arg == "dict")
				case shape == shapeEnum:
					ok = kind == "call" && arg == 1.0
				}
				if !ok {
					t.Errorf("%s: %s is used as %v under CPython, which the tier (%s) does not allow", p, h.Global, u, h.Reason)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no framework global", p)
		}
	}
}
