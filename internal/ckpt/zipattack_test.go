package ckpt

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
)

// zipAttacks are the fixtures of scripts/gen-zip-fixtures.py: each is read
// differently by torch's zip reader and a strict one. want is a piece of
// the finding that scan must report; payload says torch.load runs the
// fixture's payload (checked by TestZipAttacksRunUnderTorch).
var zipAttacks = []struct {
	file    string
	want    []string
	payload bool
}{
	{"local_name.pt", []string{`names "archive/data.pkX", the central directory "archive/data.pkl"`, "os.system"}, true},
	{"case_name.pt", []string{"os.system"}, true},
	{"disk1.pt", []string{"disk 1 of a multi-disk archive", "os.system"}, true},
	{"eocd_comment.pt", []string{"comment bytes follow it", "os.system"}, true},
	{"cd_after.pt", []string{"does not end where the end record begins", "not in the central directory", "os.system"}, true},
	{"stored_size.pt", []string{"has size 1052 but 1008 stored bytes", "os.system"}, true},
	{"deflated_big.pt", []string{"over the scanner's", "deflate bomb", "os.system"}, true},
	{"local_sizes.pt", []string{"the local header says 5 bytes"}, false},
	{"bomb_overlap.pt", []string{"overlap: the bytes", "more anomalies of the kinds above", "deflate bomb"}, false},
	{"bomb_single.pt", []string{"deflate bomb"}, false},
}

const zipAttackDir = "testdata/zipattack"

// maxZipWork bounds what scanning or inspecting one of the fixtures may
// allocate and inflate: the bombs inflate to 250 MiB and more, of which a
// scan reads only the pickle (a few KiB) and never holds a record whole.
const maxZipWork = 32 << 20

// zipWork runs f and returns what it allocated and what it inflated from
// zip records.
func zipWork(f func()) (alloc uint64, inflated int64) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	i0 := ziparc.TotalInflated()
	f()
	inflated = ziparc.TotalInflated() - i0
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc, inflated
}

func TestZipAttacksScan(t *testing.T) {
	for _, tc := range zipAttacks {
		t.Run(tc.file, func(t *testing.T) {
			var res *ScanResult
			var err error
			alloc, inflated := zipWork(func() { res, err = ScanFile(filepath.Join(zipAttackDir, tc.file)) })
			if err != nil {
				t.Fatal(err)
			}
			if res.Dangerous == 0 {
				t.Fatalf("not dangerous: %+v", res)
			}
			var all strings.Builder
			for _, h := range res.Hits {
				all.WriteString(h.Global + " " + h.Reason + "\n")
			}
			for _, w := range tc.want {
				if !strings.Contains(all.String(), w) {
					t.Errorf("no finding with %q in:\n%s", w, all.String())
				}
			}
			t.Logf("%d KiB allocated, %d KiB inflated", alloc>>10, inflated>>10)
			if alloc > maxZipWork || inflated > maxZipWork {
				t.Errorf("scan allocated %d KiB and inflated %d KiB, over %d KiB", alloc>>10, inflated>>10, maxZipWork>>10)
			}
		})
	}
}

// inspect and verify (also --deep) of the bombs say why the file is
// invalid, allocating at most maxZipWork; they inflate at most maxZipWork
// (the pickle), --deep (which checks every record's CRC-32) at most that
// and what the deflated records declare, within the archive's inflate
// budget, never holding a record.
func TestZipBombsInspectVerify(t *testing.T) {
	for _, name := range []string{"bomb_overlap.pt", "bomb_single.pt", "deflated_big.pt"} {
		path := filepath.Join(zipAttackDir, name)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		a, err := ziparc.Open(f, st.Size(), ziparc.DefaultLimits)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var declared int64
		for _, e := range a.Entries {
			if e.Method == 8 {
				declared += int64(e.Size)
			}
		}
		for _, deep := range []bool{false, true} {
			var rep *Report
			alloc, inflated := zipWork(func() { rep, err = Inspect(path, Options{Structure: true, Deep: deep}) })
			if err != nil {
				t.Fatal(err)
			}
			if rep.Valid || rep.Reason == "" {
				t.Errorf("%s deep=%v: valid %v, reason %q; want invalid with a reason", name, deep, rep.Valid, rep.Reason)
			}
			t.Logf("%s deep=%v: %d KiB allocated, %d KiB inflated of %d KiB declared: %s", name, deep, alloc>>10, inflated>>10, declared>>10, rep.Reason)
			limit := int64(maxZipWork)
			if deep {
				limit = min(maxZipWork+declared, a.InflateBudget())
			}
			if alloc > maxZipWork || inflated > limit {
				t.Errorf("%s deep=%v: allocated %d KiB (at most %d KiB) and inflated %d KiB (at most %d KiB)",
					name, deep, alloc>>10, maxZipWork>>10, inflated>>10, limit>>10)
			}
		}
	}
}

// Each payload fixture really runs its payload under torch.load (Debian's
// python3-torch): the marker file appears in the working directory. The
// benign ones load without it. One Python process loads them all, each in
// its own directory.
func TestZipAttacksRunUnderTorch(t *testing.T) {
	root := t.TempDir()
	var args []string
	for _, tc := range zipAttacks {
		if strings.HasPrefix(tc.file, "bomb") { // no payload; torch.load inflates 250 MiB
			continue
		}
		abs, _ := filepath.Abs(filepath.Join(zipAttackDir, tc.file))
		dir := filepath.Join(root, tc.file)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, abs, dir)
	}
	script := `
import os, sys, torch
a = sys.argv[1:]
for f, d in zip(a[::2], a[1::2]):
    os.chdir(d)
    try:
        torch.load(f)
        print("loaded", os.path.basename(f))
    except Exception as e:
        print("failed", os.path.basename(f), type(e).__name__, e)
`
	t.Logf("%s", runPython(t, "", script, args...))
	for _, tc := range zipAttacks {
		dir := filepath.Join(root, tc.file)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		_, err := os.Stat(filepath.Join(dir, "vramguard-zip-pwned"))
		if tc.payload && err != nil {
			t.Errorf("%s: torch.load did not run the payload", tc.file)
		}
		if !tc.payload && err == nil {
			t.Errorf("%s: the marker appeared", tc.file)
		}
	}
}

// Scanning, inspecting and deep-verifying every fixture never runs
// anything: no marker appears in the working directory.
func TestZipAttacksDoNotRunHere(t *testing.T) {
	for _, tc := range zipAttacks {
		p := filepath.Join(zipAttackDir, tc.file)
		ScanFile(p)
		Inspect(p, Options{Structure: true, Deep: true})
	}
	if _, err := os.Stat("vramguard-zip-pwned"); err == nil {
		t.Fatal("marker file appeared")
	}
}
