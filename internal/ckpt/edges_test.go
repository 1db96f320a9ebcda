package ckpt

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loaderRunScript opens each file named on stdin with the real loader
// (LOAD, a Python expression of p) in a fresh temp dir and prints whether
// the payload's file (vg-pwned) appeared there.
const loaderRunScript = `
import json, os, sys, tempfile, warnings
warnings.simplefilter("ignore")
import numpy, pickle
if "torch.load" in sys.argv[1]:
    import torch
out = {}
for p in sys.stdin.read().split():
    d = tempfile.mkdtemp()
    os.chdir(d)
    try:
        LOAD
    except Exception:
        pass
    out[os.path.basename(p)] = os.path.exists(os.path.join(d, "vg-pwned"))
    os.chdir("/")
    if os.path.exists(os.path.join(d, "vg-pwned")):
        os.remove(os.path.join(d, "vg-pwned"))
    os.rmdir(d)
print(json.dumps(out))
`

// torchLoad torch.loads the file (torch's own default, weights_only=False
// on Debian's 1.13).
const torchLoad = `
        torch.load(p)`

// numpyLoad reads every array of a .npy or .npz as a user would.
const numpyLoad = `
        x = numpy.load(p, allow_pickle=True)
        if hasattr(x, "files"):
            [x[k] for k in x.files]`

// runLoader reports, per base name, whether loading files with load ran
// their payload.
func runLoader(t *testing.T, load string, files []string) map[string]bool {
	t.Helper()
	var abs []string
	for _, f := range files {
		p, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		abs = append(abs, p)
	}
	script := strings.Replace(loaderRunScript, "        LOAD", strings.TrimLeft(load, "\n"), 1)
	out := runPython(t, strings.Join(abs, "\n"), script, load)
	var ran map[string]bool
	if err := json.Unmarshal([]byte(out), &ran); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return ran
}

// numpyCases: scripts/gen-edge-fixtures.py's numpy files. pickles is how
// many pickles numpy.load unpickles from the file (one per object array).
var numpyCases = []struct {
	file    string
	format  string
	safe    bool
	pickles int
}{
	{"benign_int.npy", FormatNpy, true, 0},
	{"benign_struct.npy", FormatNpy, true, 0},
	{"benign_datetime.npy", FormatNpy, true, 0},
	{"benign_object.npy", FormatNpy, true, 1},
	{"benign_arrays.npz", FormatNpz, true, 0},
	{"benign_compressed.npz", FormatNpz, true, 1},
	{"attack_object.npy", FormatNpy, false, 1},
	{"attack_object_v2.npy", FormatNpy, false, 1},
	{"attack_struct_object.npy", FormatNpy, false, 1},
	{"attack_stored.npz", FormatNpz, false, 1},
	{"attack_deflated.npz", FormatNpz, false, 1},
	{"attack_noext.npz", FormatNpz, false, 1},
}

// TestScanNumpy: a .npy is read by its header (a plain array is raw data,
// not a failed pickle), an object array's pickle is scanned, and every
// .npz member, stored or deflated, whatever its name.
func TestScanNumpy(t *testing.T) {
	t.Parallel()
	for _, tc := range numpyCases {
		t.Run(tc.file, func(t *testing.T) {
			res, err := ScanFile(filepath.Join("testdata/edges", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if res.Format != tc.format || res.Safe != tc.safe || res.Pickles != tc.pickles {
				t.Errorf("format %q safe=%v pickles=%d, want %q %v %d; hits %+v errors %v not understood %v",
					res.Format, res.Safe, res.Pickles, tc.format, tc.safe, tc.pickles, res.Hits, res.Errors, res.NotUnderstood)
			}
			if !tc.safe && (res.Dangerous != 1 || res.Hits[0].Global != "os.system") {
				t.Errorf("want os.system dangerous, got %+v", res.Hits)
			}
		})
	}
}

// TestNumpyFixturesRunUnderNumpy proves the attack fixtures are real:
// Debian's numpy.load(allow_pickle=True) runs every payload, and none of
// the benign files runs anything.
func TestNumpyFixturesRunUnderNumpy(t *testing.T) {
	t.Parallel()
	var files []string
	for _, tc := range numpyCases {
		files = append(files, filepath.Join("testdata/edges", tc.file))
	}
	ran := runLoader(t, numpyLoad, files)
	for _, tc := range numpyCases {
		if ran[tc.file] == tc.safe {
			t.Errorf("%s: numpy.load ran a payload: %v, want %v", tc.file, ran[tc.file], !tc.safe)
		}
	}
}

// TestNpyHeader: headers as numpy's _read_array_header reads them.
func TestNpyHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		object bool
		err    string
	}{
		{`{'descr': '<i8', 'fortran_order': False, 'shape': (3, 4), }`, false, ""},
		{`{'descr': '|O', 'fortran_order': False, 'shape': (1,), }`, true, ""},
		{`{"descr": "O", "fortran_order": True, "shape": ()}`, true, ""},
		{`{'descr': [('a', '<i4'), (('title', 'b'), '|O', (2,))], 'fortran_order': False, 'shape': (3,)}`, true, ""},
		{`{'descr': [('a', '<i4'), ('b', '<f8', (2,))], 'fortran_order': False, 'shape': (3L,)}`, false, ""},
		{`{'descr': ('|O', (2,)), 'fortran_order': False, 'shape': (1,)}`, true, ""},
		{`{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (1,)}`, false, ""},
		{`{'descr': 'object', 'fortran_order': False, 'shape': (1,)}`, true, ""},
		{`{'descr': 'mystery', 'fortran_order': False, 'shape': (1,)}`, false, "not a dtype"},
		{`{'descr': '<i8', 'fortran_order': False, 'shape': (1,), 'x': 1}`, false, "not a dict of"},
		{`{'descr': '<i8', 'fortran_order': 0, 'shape': (1,)}`, false, "fortran_order"},
		{`{'descr': '<i8', 'fortran_order': False, 'shape': [1]}`, false, "shape"},
		{`{'descr': '<i8', 'fortran_order': False, 'shape': (1,)} # c`, false, "unexpected"},
		{`{'descr': '<i8', 'fortran_order': False, 'shape': (1+1,)}`, false, "expected"},
	}
	for _, tc := range tests {
		b := []byte(npyMagic + "\x01\x00")
		b = append(b, byte(len(tc.header)), byte(len(tc.header)>>8))
		b = append(b, tc.header...)
		h, err := readNpyHeader(bytes.NewReader(b), int64(len(b)))
		obj := h.hasObject
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.header, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.header, err, tc.err)
		case obj != tc.object:
			t.Errorf("%s: hasobject %v, want %v", tc.header, obj, tc.object)
		}
	}
}

// TestScanNotUnderstood: content the scanner cannot read is never safe,
// and has a status of its own; in a directory, a file no loader unpickles
// is named as skipped.
func TestScanNotUnderstood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blob := filepath.Join(dir, "w.bin")
	if err := os.WriteFile(blob, []byte("\x00\x01\x02 in no format"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ScanFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	if res.Safe || res.Status != StatusNotUnderstood || len(res.NotUnderstood) != 1 || len(res.Errors) != 0 {
		t.Errorf("alone: %+v", res)
	}
	rs, err := ScanPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Safe || rs[0].Status != StatusSkipped || !strings.Contains(rs[0].Skipped, "no pickle opcode") {
		t.Errorf("in a directory: %+v", rs)
	}
	// A .npy whose header the scanner cannot parse.
	hdr := "{'descr': 'weird', 'fortran_order': False, 'shape': (1,)}"
	npy := filepath.Join(dir, "a.npy")
	os.WriteFile(npy, append([]byte(npyMagic+"\x01\x00"+string(rune(len(hdr)))+"\x00"), hdr...), 0o644)
	res, err = ScanFile(npy)
	if err != nil {
		t.Fatal(err)
	}
	if res.Safe || res.Status != StatusNotUnderstood || res.Format != FormatNpy {
		t.Errorf(".npy header: %+v", res)
	}
}

// TestScanBuildSideEffects: BUILD on an allowlisted function, on what an
// allowlisted non-container returns and on what a persistent id returns,
// and persistent ids other than torch's storage records are findings
// (a legacy module record is unknown, the others dangerous); real saves
// pass (the nn.Module saves of TestScanPassesRealTorchFiles fill modules,
// numpy arrays and OrderedDicts by BUILD).
func TestScanBuildSideEffects(t *testing.T) {
	t.Parallel()
	bu := func(s string) string { return "X" + string([]byte{byte(len(s)), 0, 0, 0}) + s }
	tests := []struct {
		name, pickle, want, verdict string
	}{
		{"build on a function", "\x80\x02ctorch.nn.functional\nrelu\nN}" + bu("dump_patches") + "\x88s\x86b.", "BUILD on the class or function itself", VerdictDangerous},
		{"build on torch.Size", "\x80\x02ctorch\nSize\n)Rq\x00}" + bu("a") + "K\x01sb.", "BUILD on what torch.Size returns", VerdictDangerous},
		{"odd persistent id", "\x80\x02(" + bu("weird") + "K\x01tQ.", "persistent id", VerdictDangerous},
		{"pid as a string", "\x80\x02" + bu("weird") + "Q.", "persistent id", VerdictDangerous},
		{"build on a storage record", "\x80\x02(" + bu("storage") + "ctorch\nFloatStorage\n" + bu("0") + bu("cpu") + "K\x01tQN}" + bu("a") + "K\x01s\x86b.", "BUILD on what persistent_load returns for a (\"storage\", torch.FloatStorage, ...) record", VerdictDangerous},
		{"module record", "\x80\x02(" + bu("module") + "ctorch.nn.modules.linear\nLinear\n" + bu("f.py") + bu("src") + "tQ.", "legacy module record of torch.nn.modules.linear.Linear", VerdictUnknown},
		{"module record of no class", "\x80\x02(" + bu("module") + "K\x01tQ.", "persistent id a (\"module\", ...) record is not one of torch's storage records", VerdictDangerous},
	}
	dir := t.TempDir()
	for _, tc := range tests {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".pkl")
		os.WriteFile(p, []byte(tc.pickle), 0o644)
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, h := range res.Hits {
			found = found || (h.Verdict == tc.verdict && strings.Contains(h.Reason, tc.want))
		}
		if res.Safe || !found || len(res.Errors) != 0 {
			t.Errorf("%s: safe=%v hits %+v errors %v", tc.name, res.Safe, res.Hits, res.Errors)
		}
	}
	// An OrderedDict with attributes, as every state_dict is saved, passes.
	ok := "\x80\x02ccollections\nOrderedDict\n)Rq\x00}" + bu("_metadata") + "}sb."
	p := filepath.Join(dir, "od.pkl")
	os.WriteFile(p, []byte(ok), 0o644)
	if res, err := ScanFile(p); err != nil || !res.Safe {
		t.Errorf("OrderedDict with _metadata: %+v %v", res, err)
	}
}

// TestBuildPatchRunsUnderTorch: scripts/gen-edge-fixtures.py's legacy
// files name only allowlisted globals, and Debian's torch.load writes
// relu.patch into its working directory from each: attack_build_patch.pt
// by a BUILD on relu itself, attack_pid_patch.pt by a BUILD on what a
// ("module", relu, "", "") record returns (relu), which the scan passed
// before persistent ids other than storage records were findings. scan
// fails both on that BUILD and names every module record.
func TestBuildPatchRunsUnderTorch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, buildOn string
		records       int
	}{
		{"attack_build_patch.pt", "torch.nn.functional.relu", 1},
		{"attack_pid_patch.pt", "persistent id", 2},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			p, _ := filepath.Abs(filepath.Join("testdata/edges", tc.file))
			res, err := ScanFile(p)
			if err != nil {
				t.Fatal(err)
			}
			builds, records := 0, 0
			for _, h := range res.Hits {
				switch {
				case h.Opcode == "BUILD" && h.Verdict == VerdictDangerous && h.Global == tc.buildOn:
					builds++
				case h.Opcode == "PERSID" && h.Verdict == VerdictUnknown && strings.Contains(h.Reason, "legacy module record of torch.nn.functional.relu"):
					records++
				}
			}
			if res.Safe || res.Status != StatusDangerous || builds != 1 || records != tc.records {
				t.Errorf("scan: %d BUILD and %d module-record findings, want 1 and %d: %+v", builds, records, tc.records, res)
			}
			dir := t.TempDir()
			runPython(t, "", `
import os, sys, warnings
warnings.simplefilter("ignore")
import torch
os.chdir(sys.argv[2])
try:
    torch.load(sys.argv[1])
except Exception:
    pass
`, p, dir)
			if _, err := os.Stat(filepath.Join(dir, "relu.patch")); err != nil {
				t.Errorf("torch.load did not write relu.patch: %v", err)
			}
		})
	}
}
