package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/pickle"
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

// pwned is the file every attack_* payload creates in its working
// directory (scripts/gen-malicious-fixtures.py).
const pwned = "vg-pwned"

// attacks: issue #14's pickles that torch.load runs and that a denylist
// scanner passed. want is a global that must be reported, not safe, and
// why a substring of its reason.
var attacks = []struct {
	file, want, verdict, why string
}{
	{"attack_dotted_global.pkl", "torch.serialization.os.system", VerdictDangerous, "serialization.os (module os)"},
	{"attack_dotted_stack_global.pkl", "pathlib.Path.write_text", VerdictUnknown, "dotted name walked with getattr"},
	{"attack_import_dotted_name.pkl", "torch._utils._import_dotted_name", VerdictDangerous, "resolves a string"},
	{"attack_import_dotted_name_dotted.pkl", "torch._utils._import_dotted_name", VerdictDangerous, "resolves a string"},
	{"attack_string_escapes.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_unicode_escapes.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_deep_lists.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_deep_marks.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_memo_key_space.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_int_base.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_surrogate.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_float_nul.pkl", "os.system", VerdictDangerous, "module os"},
	{"attack_torch_zip_dotted.pt", "torch.serialization.os.system", VerdictDangerous, "serialization.os (module os)"},
	{"attack_tar_storages.tar", "os.system", VerdictDangerous, "module os"},
}

// TestScanAttacks: scan fails each attack and names the global that runs
// the payload, without running it.
func TestScanAttacks(t *testing.T) {
	for _, tc := range attacks {
		t.Run(tc.file, func(t *testing.T) {
			res, err := ScanFile(filepath.Join("testdata/malicious", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if res.Safe {
				t.Errorf("scan passes it: %+v", res)
			}
			found := false
			for _, h := range res.Hits {
				if h.Global == tc.want {
					found = true
					if h.Verdict != tc.verdict || !strings.Contains(h.Reason, tc.why) {
						t.Errorf("%s: %s (%s), want %s with %q", h.Global, h.Verdict, h.Reason, tc.verdict, tc.why)
					}
				}
			}
			if !found {
				t.Errorf("%s not reported; hits %+v, errors %v", tc.want, res.Hits, res.Errors)
			}
			// The decoder reads every attack to its end; only the tar's
			// storage pickle is followed by no storage (torch fails there
			// too, after running it), which scan reports as well.
			if len(res.Errors) != 0 && tc.file != "attack_tar_storages.tar" {
				t.Errorf("decode errors: %v", res.Errors)
			}
		})
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatalf("%s exists: a payload ran", pwned)
	}
}

// TestMaliciousFixturesRunUnderTorch proves the attack fixtures are real:
// Debian's torch (1.13, weights_only=False by default) runs every payload
// when it loads the file.
func TestMaliciousFixturesRunUnderTorch(t *testing.T) {
	var paths []string
	for _, tc := range attacks {
		paths = append(paths, filepath.Join("testdata/malicious", tc.file))
	}
	ran := runLoader(t, torchLoad, paths)
	for _, tc := range attacks {
		if !ran[tc.file] {
			t.Errorf("%s: torch.load did not run the payload", tc.file)
		}
	}
}

// benignTorch are files real torch.save wrote; scan passes every one.
var benignTorch = []string{
	"torch/state_dict.pt", "torch/training.pt", "torch/legacy.pt", "torch/dtypes.pt", "torch/dtypes_legacy.pt",
	"torch/numpy.pt", "torch/nested.pt", "torch/views.pt", "torch/lightning.ckpt", "torch/plain0.pkl", "torch/plain4.pkl",
	"torch/hf/checkpoint-500/optimizer.pt", "torch/hf/checkpoint-500/rng_state.pth", "torch/hf/checkpoint-500/scheduler.pt",
	"torch/model.safetensors", "torch/hf/checkpoint-500/model.safetensors",
	"malicious/benign.pt", "malicious/benign_module_nn.pt", "malicious/benign_module_nn_more.pt",
	"malicious/benign_quantized.pt", "malicious/benign_sparse.pt",
	"malicious/benign_sparse_legacy.pt", "malicious/benign_training_full.pt", "malicious/benign_training_full_legacy.pt",
	"malicious/benign_proto4.pt",
}

func TestScanPassesRealTorchFiles(t *testing.T) {
	for _, p := range benignTorch {
		res, err := ScanFile(filepath.Join("testdata", p))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Safe || (res.Pickles == 0 && res.Format != FormatSafetensors) {
			for _, h := range res.Hits {
				if h.Verdict != VerdictSafe {
					t.Logf("%s: %s %s: %s", p, h.Verdict, h.Global, h.Reason)
				}
			}
			t.Errorf("%s: safe=%v, %d pickles, errors %v", p, res.Safe, res.Pickles, res.Errors)
		}
	}
}

// legacyModuleClasses is what torch's legacy loader checks the source of:
// it records the class of every ("module", cls, file, source) record
// whose source torch.load reads to compare (_check_container_source).
const legacyModuleClasses = `
import json, sys, warnings
warnings.simplefilter("ignore")
import torch, torch.serialization as s
seen, source = [], s.get_source_lines_and_file
def spy(cls, *a):
    seen.append(cls.__module__ + "." + cls.__qualname__)
    return source(cls, *a)
s.get_source_lines_and_file = spy
torch.load(sys.argv[1])
print(json.dumps(seen))
`

// TestScanLegacyWholeModel: a whole nn.Module saved in the legacy format
// (scripts/gen-malicious-fixtures.py, real torch.save) holds a module
// record for every layer, each one a finding (unknown), naming exactly the
// classes torch.load checks the source of; --allow of those classes
// passes it. The same model saved as a zip has no such records and passes
// (TestScanPassesRealTorchFiles).
func TestScanLegacyWholeModel(t *testing.T) {
	t.Parallel()
	p := "testdata/malicious/benign_module_nn_legacy.pt"
	var want []string
	if err := json.Unmarshal([]byte(runPython(t, "", legacyModuleClasses, p)), &want); err != nil || len(want) < 2 {
		t.Fatalf("torch's module records: %v %v", want, err)
	}
	res, err := ScanFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range res.Hits {
		if h.Opcode == "PERSID" {
			cls, _, _ := strings.Cut(strings.TrimPrefix(h.Reason, "torch's legacy module record of "), " ")
			got = append(got, cls)
		}
	}
	if res.Safe || res.Status != StatusUnknown || res.Unknown != len(want) || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("status %s, %d unknown: module records %v, torch checks %v", res.Status, res.Unknown, got, want)
	}
	res, err = ScanFileWith(p, ScanOptions{Allow: want})
	if err != nil || !res.Safe {
		t.Errorf("with --allow %v: %+v %v", want, res, err)
	}
	res, err = ScanFileWith(p, ScanOptions{Allow: want[1:]})
	if err != nil || res.Safe || res.Unknown != 1 {
		t.Errorf("with --allow of all but %s: %+v %v", want[0], res, err)
	}
}

// TestScanAllow: a whole model with a class of its own fails until the
// user allows that class by its full dotted path.
func TestScanAllow(t *testing.T) {
	for _, p := range []string{"testdata/malicious/benign_own_class.pt", "testdata/torch/module.pt"} {
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Safe || res.Unknown != 1 || res.Dangerous != 0 {
			t.Errorf("%s: safe=%v unknown=%d dangerous=%d, want a failure on __main__.Net alone", p, res.Safe, res.Unknown, res.Dangerous)
		}
		res, err = ScanFileWith(p, ScanOptions{Allow: []string{"__main__.Net"}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Safe {
			t.Errorf("%s with --allow __main__.Net: %+v", p, res)
		}
	}
	// --allow accepts that name only: a payload stays a failure.
	res, err := ScanFileWith("testdata/malicious/attack_dotted_stack_global.pkl", ScanOptions{Allow: []string{"pathlib.Path"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Safe {
		t.Error("allowing pathlib.Path passed pathlib.Path.write_text")
	}
	for _, bad := range []string{"Net", "os.", "a..b", "mod.na-me", ""} {
		if CheckAllowName(bad) == nil {
			t.Errorf("CheckAllowName(%q) accepted", bad)
		}
	}
	if err := CheckAllowName("mypkg.models.Net"); err != nil {
		t.Error(err)
	}
}

// allowSplitsScript reads "full home" pairs and, for each, imports every
// module a pickle could name on the way to it (home and the packages
// above it), walks the rest with getattr as find_class does, and checks it
// reaches the object home.name names. It also prints torch's own
// weights-only allowlist.
const allowSplitsScript = `
import importlib, json, sys, warnings
warnings.simplefilter("ignore")
import torch
from torch._weights_only_unpickler import _get_allowed_globals
out = {"missing": [], "mismatch": [], "torch": sorted(_get_allowed_globals().keys())}
for line in sys.stdin:
    full, home = line.split()
    name = full[len(home) + 1:]
    try:
        obj = importlib.import_module(home)
        for p in name.split("."):
            obj = getattr(obj, p)
    except Exception:
        out["missing"].append(full)
        continue
    parts = home.split(".")
    for i in range(1, len(parts) + 1):
        mod = ".".join(parts[:i])
        rest = full[len(mod) + 1:]
        try:
            o = importlib.import_module(mod)
            for p in rest.split("."):
                o = getattr(o, p)
        except Exception as e:
            out["mismatch"].append(f"{mod} + {rest}: {e}")
            continue
        if o is not obj:
            out["mismatch"].append(f"{mod} + {rest} is not {full}")
print(json.dumps(out))
`

// TestAllowlistAsPython checks the allowlist against Debian's torch: every
// split of an allowed name that allowedGlobal accepts reaches the same
// object in Python, every name exists unless it belongs to a later torch
// or numpy, and everything torch's weights-only unpickler allows is
// allowed.
func TestAllowlistAsPython(t *testing.T) {
	var in strings.Builder
	for full, home := range allowIndex {
		in.WriteString(full + " " + home + "\n")
	}
	out := runPython(t, in.String(), allowSplitsScript)
	var got struct{ Missing, Mismatch, Torch []string }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, m := range got.Mismatch {
		t.Errorf("split reaches another object: %s", m)
	}
	later := func(full string) bool {
		for _, p := range []string{"numpy._core.", "torch.distributed.checkpoint.", "torch._utils._rebuild_", "torch.device", "torch._tensor.", "torch.nn.parameter.Buffer"} {
			if strings.HasPrefix(full, p) {
				return true
			}
		}
		return false
	}
	t.Logf("not in Debian's torch 1.13/numpy 1.24 (later releases): %v", got.Missing)
	for _, m := range got.Missing {
		if !later(m) {
			t.Errorf("%s does not exist in Debian's torch/numpy", m)
		}
	}
	if len(got.Torch) < 50 {
		t.Fatalf("torch's allowlist has %d names", len(got.Torch))
	}
	for _, full := range got.Torch {
		i := strings.LastIndexByte(full, '.')
		if !allowedGlobal(full[:i], full[i+1:], nil) {
			t.Errorf("torch's weights-only unpickler allows %s, scan does not", full)
		}
	}
}

// TestResolveGlobal: names as find_class reads them.
func TestResolveGlobal(t *testing.T) {
	tests := []struct {
		mod, name string
		proto     int
		safe      bool
	}{
		{"torch._utils", "_rebuild_tensor_v2", 2, true},
		{"torch", "_utils._rebuild_tensor_v2", 4, true},
		{"torch.nn", "modules.conv.Conv2d", 4, true},
		{"torch.nn.modules.conv", "Conv2d", 2, true},
		{"__builtin__", "set", 2, true},                    // fix_imports below protocol 3
		{"__builtin__", "set", 3, false},                   // no such module in Python 3
		{"copy_reg", "_reconstructor", 2, false},           // copyreg._reconstructor: not allowed
		{"torch.tensor", "_rebuild_from_type_v2", 2, true}, // torch's own rename
		{"torch", "_utils._import_dotted_name", 4, false},
		{"torch", "serialization.os.system", 4, false},
		{"torch._utils", "torch.contiguous_format", 4, false}, // through a module attribute
		{"torch._utils._rebuild_tensor_v2", "x", 4, false},
		{"torch", "FloatStorage", 2, true},
		{"os", "FloatStorage", 2, false},
		{"collections", "OrderedDict.__init__.__globals__", 4, false},
	}
	for _, tc := range tests {
		v, why := Classify(pickle.GlobalRef{Global: pickle.Global{Module: tc.mod, Name: tc.name}, Resolved: true, Proto: tc.proto}, nil)
		if (v == VerdictSafe) != tc.safe {
			t.Errorf("%s + %s (protocol %d): %s %s", tc.mod, tc.name, tc.proto, v, why)
		}
	}
}

// TestScanTarFollowsStorages: in a pre-1.0 tar, scan reads the storages
// and tensors records as torch does, pickle by pickle across the raw data
// between them: the raw bytes of a storage are data (even when they spell a
// pickle), the pickle after them is scanned.
func TestScanTarFollowsStorages(t *testing.T) {
	raw := []byte("cos\nsystem\n(S'x'\ntR.") // 20 bytes of FloatStorage data: 5 elements
	storage := func(key string) []byte {
		return append([]byte("\x80\x02(X\x01\x00\x00\x00"+key+"X\x03\x00\x00\x00cpuctorch\nFloatStorage\ntq\x00.\x05\x00\x00\x00\x00\x00\x00\x00"), raw...)
	}
	build := func(storages []byte) []byte {
		return tarOf(t, member{"sys_info", []byte("\x80\x02}q\x00.")}, member{"storages", storages},
			member{"tensors", []byte("\x80\x02K\x01.\x80\x02(X\x01\x00\x00\x00tX\x01\x00\x00\x000ctorch\nFloatTensor\ntq\x00.\x01\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")},
			member{"pickle", []byte("\x80\x02}q\x00.")})
	}
	scan := func(b []byte) *ScanResult {
		res := &ScanResult{Format: FormatTorchTar}
		scanReader(bytes.NewReader(b), int64(len(b)), res)
		return res
	}
	good := append(append(append([]byte("\x80\x02K\x02."), storage("0")...), storage("1")...), "\x80\x02]q\x00."...)
	if res := scan(build(good)); !res.Safe || res.Pickles != 8 {
		t.Errorf("benign tar: safe=%v, %d pickles (want 8: sys_info, 4 in storages, 2 in tensors, pickle), hits %+v, errors %v", res.Safe, res.Pickles, res.Hits, res.Errors)
	}
	// The second storage's pickle carries the payload.
	evil := append(append(append([]byte("\x80\x02K\x02."), storage("0")...), "\x80\x02cos\nsystem\n(S'x'\ntR."...), "\x80\x02]q\x00."...)
	if res := scan(build(evil)); res.Safe || res.Dangerous != 1 {
		t.Errorf("payload in the second storage pickle: safe=%v dangerous=%d, hits %+v", res.Safe, res.Dangerous, res.Hits)
	}
	// A count the records do not hold fails.
	short := append([]byte("\x80\x02K\x03."), storage("0")...)
	if res := scan(build(short)); res.Safe {
		t.Errorf("storages record shorter than its count passes: %+v", res)
	}
}

// polyglotSafetensors is a file our reader parses as safetensors (a JSON
// header with one empty tensor, padded with spaces) whose first bytes are
// also a pickle: PROTO 4 (the header length's low bytes), BINFLOAT eating
// the rest of the length, then, inside the JSON key,
// multiprocessing.popen_spawn_posix + os.path.os.path.os.path.os.system
// (a dotted walk to os.system) called with "touch vg-pwned". torch.load
// does not know safetensors and unpickles it from byte 0. (4.6 MB, so it
// is built here, not committed; scripts/gen-malicious-fixtures.py has
// nothing to add.)
func polyglotSafetensors() []byte {
	sb := func(s string) string { return "\x8c" + string(rune(len(s))) + s }
	pick := sb("multiprocessing.popen_spawn_posix") + sb("os.path.os.path.os.path.os.system") + "\x93" +
		sb(fmt.Sprintf("%-32s", "touch vg-pwned")) + "\x85R"
	const n = 0x80 | 0x04<<8 | 'G'<<16
	header := `{"k` + pick + `":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`
	header += strings.Repeat(" ", n-len(header))
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(n))
	b.WriteString(header)
	return b.Bytes()
}

// TestScanSafetensorsPolyglot: scan reads a safetensors file the way
// torch.load would too, and Debian's torch does run this one.
func TestScanSafetensorsPolyglot(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pytorch_model.bin")
	if err := os.WriteFile(p, polyglotSafetensors(), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ScanFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Format != FormatSafetensors || res.Safe || res.Dangerous != 1 {
		t.Fatalf("format %s safe=%v dangerous=%d: %+v", res.Format, res.Safe, res.Dangerous, res.Hits)
	}
	if h := res.Hits[0]; h.Global != "multiprocessing.popen_spawn_posix.os.path.os.path.os.path.os.system" {
		t.Errorf("hit %+v", h)
	}
	if !runLoader(t, torchLoad, []string{p})["pytorch_model.bin"] {
		t.Error("torch.load did not run the polyglot's payload")
	}
}

// tarBlock is one ustar header: name, size and type, with its checksum.
func tarBlock(name string, size int, typ byte) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	copy(b[148:], fmt.Sprintf("%06o\x00 ", tarSum(b)))
	return b
}

// tarSum blanks b's checksum field and returns the sum of its bytes: the
// header's checksum, as ustar computes it.
func tarSum(b []byte) int {
	copy(b[148:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	return sum
}

// tarPad pads b with zeros to a whole number of 512-byte blocks.
func tarPad(b []byte) []byte { return append(b, make([]byte, (512-len(b)%512)%512)...) }

// TestScanPickleTarPolyglot: a file that starts as a harmless pickle and is
// also a valid tar is loaded by torch.load as a pre-1.0 tar, from its
// storages record; scan reads it that way too. A tar that hides a member
// behind a link fails.
func TestScanPickleTarPolyglot(t *testing.T) {
	payload := []byte("\x80\x02cos\nsystem\n(S'touch vg-pwned'\ntR.")
	var f []byte
	f = append(f, tarBlock("\x80\x02K\x01.", 0, '0')...)
	f = append(f, tarBlock("storages", len(payload), '0')...)
	f = append(f, tarPad(payload)...)
	f = append(f, make([]byte, 1024)...)
	dir := t.TempDir()
	p := filepath.Join(dir, "model.pt")
	if err := os.WriteFile(p, f, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ScanFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Safe || res.Dangerous != 1 || res.Hits[len(res.Hits)-1].Record != "storages" {
		t.Errorf("format %s safe=%v dangerous=%d hits %+v errors %v", res.Format, res.Safe, res.Dangerous, res.Hits, res.Errors)
	}
	if !runLoader(t, torchLoad, []string{p})["model.pt"] {
		t.Error("torch.load did not run the tar's payload")
	}
	// storages as a hard link to a member of another name.
	var l []byte
	l = append(l, tarBlock("evil", len(payload), '0')...)
	l = append(l, tarPad(payload)...)
	link := tarBlock("storages", 0, '1')
	copy(link[157:], "evil")
	copy(link[148:], fmt.Sprintf("%06o\x00 ", tarSum(link)))
	l = append(l, link...)
	l = append(l, make([]byte, 1024)...)
	res = &ScanResult{Format: FormatTorchTar}
	scanReader(bytes.NewReader(l), int64(len(l)), res)
	if res.Safe {
		t.Errorf("a tar with a hard link passes: %+v", res)
	}
}

// TestScanDeepNesting: nesting far beyond any fixed limit, as Python reads
// it, is followed to the payload after it in linear time (the decoder keeps
// an explicit stack).
func TestScanDeepNesting(t *testing.T) {
	const n = 300_000
	var b bytes.Buffer
	b.WriteString("\x80\x02")
	b.WriteString(strings.Repeat("(", n))
	b.WriteString(strings.Repeat("l", n))
	b.WriteString(strings.Repeat("]", n))
	b.WriteString(strings.Repeat("a", n-1))
	b.WriteString("00cos\nsystem\n(S'x'\ntR.")
	p := filepath.Join(t.TempDir(), "deep.pkl")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ScanFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Safe || res.Dangerous != 1 || len(res.Errors) != 0 {
		t.Errorf("safe=%v dangerous=%d errors %v", res.Safe, res.Dangerous, res.Errors)
	}
}
