package ckpt

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
)

// TestScanCorpusSamples: every sample of other scanners' test suites and of
// picklescan's is judged: what SOURCES.md calls a dangerous global is
// dangerous, a non-allowlisted one fails, files with no globals or only
// tensor and collection globals pass (the password-protected zip is not
// understood, never safe), and none falls in the framework tier;
// picklescan's benign files pass and everything else fails.
func TestScanCorpusSamples(t *testing.T) {
	t.Parallel()
	root := testbin.Corpora(t)
	verdicts := sourcesVerdicts(t, filepath.Join(root, "SOURCES.md"))
	n := 0
	for file, v := range verdicts {
		n++
		res, err := ScanFile(filepath.Join(root, "scanners", file))
		if err != nil {
			t.Fatal(err)
		}
		ok := res.Status != StatusFramework
		switch {
		case v.verdict == "dangerous global":
			ok = ok && res.Status == StatusDangerous
		case strings.HasPrefix(v.verdict, "non-allowlisted"):
			ok = ok && !res.Safe
		case strings.Contains(v.notes, "must be reported as unscannable"):
			ok = ok && !res.Safe && res.Status == StatusNotUnderstood
		default:
			ok = ok && res.Safe
		}
		if !ok {
			t.Errorf("scanners/%s (%s): status %s, safe %v; hits %+v errors %q", file, v.verdict, res.Status, res.Safe, res.Hits, res.Errors)
		}
	}
	if n < 80 {
		t.Errorf("only %d scanner samples in SOURCES.md", n)
	}
	benign := map[string]bool{"benign0_v0.pkl": true, "benign0_v3.pkl": true, "benign0_v4.pkl": true, "new_pytorch_model.bin": true,
		"pytorch_model.bin": true, "int_array.npy": true, "int_arrays.npz": true, "int_arrays_compressed.npz": true,
		"object_array.npy": true, "object_arrays.npz": true, "object_arrays_compressed.npz": true}
	m := 0
	for _, sub := range []string{"data", "data2"} {
		ents, err := os.ReadDir(filepath.Join(root, "picklescan", sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			m++
			res, err := ScanFile(filepath.Join(root, "picklescan", sub, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if res.Safe != benign[e.Name()] || res.Status == StatusFramework {
				t.Errorf("picklescan/%s/%s: status %s, safe %v; hits %+v", sub, e.Name(), res.Status, res.Safe, res.Hits)
			}
		}
	}
	if m < 100 {
		t.Errorf("only %d picklescan samples", m)
	}
}

type sourcesRow struct{ verdict, notes string }

// sourcesVerdicts reads SOURCES.md's table of other scanners' samples
// (section 3): file under scanners/ -> the verdict and notes columns.
func sourcesVerdicts(t *testing.T, path string) map[string]sourcesRow {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]sourcesRow{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	in := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "## ") {
			in = strings.HasPrefix(sc.Text(), "## 3.")
		}
		if !in {
			continue
		}
		cols := strings.Split(sc.Text(), " | ")
		if len(cols) < 10 || !strings.HasPrefix(cols[0], "| `") {
			continue
		}
		file := strings.Trim(strings.TrimPrefix(cols[0], "| "), "`")
		out[file] = sourcesRow{verdict: strings.TrimSpace(cols[len(cols)-2]), notes: cols[len(cols)-1]}
	}
	return out
}

// TestScanSampleDetails: a password-protected zip is named encrypted (not
// understood, never safe, no zip anomaly); a pickle whose nt.system import
// sits past a FRAME longer than the file names that import, which
// Python's pure-Python unpickler reaches (it does not check a frame's
// length; /usr/bin/python3 shows it).
func TestScanSampleDetails(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"scanners/modelscan/password_protected.zip", "picklescan/data/benign_password_protected.zip"} {
		res, err := ScanFile(testbin.CorpusFile(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if res.Safe || res.Status != StatusNotUnderstood || len(res.Hits) != 0 || len(res.NotUnderstood) != 1 ||
			!strings.Contains(res.NotUnderstood[0], "encrypted (a password-protected zip)") {
			t.Errorf("%s: status %s, hits %+v, not understood %q", name, res.Status, res.Hits, res.NotUnderstood)
		}
	}
	p := testbin.CorpusFile(t, "scanners/modelaudit/pickles__nt_alias_attack.pkl")
	res, err := ScanFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusDangerous || len(res.Hits) != 1 || res.Hits[0].Global != "nt.system" || res.Hits[0].Offset != 25 || len(res.Errors) != 1 {
		t.Errorf("nt_alias_attack: status %s, hits %+v, errors %q", res.Status, res.Hits, res.Errors)
	}
	testbin.Need(t, testbin.NumPy) // (any Debian Python package brings /usr/bin/python3)
	out, err := exec.Command("/usr/bin/python3", "-c", `import io, pickle, sys
class U(pickle._Unpickler):
    def find_class(self, m, n):
        print(m + "." + n); sys.exit(0)
U(io.BytesIO(open(sys.argv[1], "rb").read())).load()`, p).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "nt.system" {
		t.Errorf("pure-Python unpickler: %v %s", err, out)
	}
}
