package cli

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
	"github.com/vramguard/vramguard/internal/testbin"
)

const ckptTestdata = "../ckpt/testdata"

func runCkpt(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{IO: IOStreams{Out: &out, ErrOut: &errOut}, Getenv: os.Getenv, Now: time.Now}
	root := NewCmdRoot(f)
	root.SetArgs(append([]string{"ckpt"}, args...))
	code = exitCode(f, root.Execute())
	return code, out.String(), errOut.String()
}

// runDir holds two good checkpoints and a newer torn one.
func runDir(t *testing.T) string {
	dir := t.TempDir()
	t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	testbin.CopyFile(t, ckptTestdata+"/torch/state_dict.pt", filepath.Join(dir, "epoch1.pt"), t0)
	testbin.CopyFile(t, ckptTestdata+"/torch/training.pt", filepath.Join(dir, "epoch2.pt"), t0.Add(time.Hour))
	b, _ := os.ReadFile(ckptTestdata + "/torch/training.pt")
	os.WriteFile(filepath.Join(dir, "epoch3.pt"), b[:len(b)-100], 0o644)
	os.Chtimes(filepath.Join(dir, "epoch3.pt"), t0.Add(2*time.Hour), t0.Add(2*time.Hour))
	os.WriteFile(filepath.Join(dir, "train.log"), []byte("epoch 3\n"), 0o644)
	return dir
}

func TestCkptCommands(t *testing.T) {
	dir := runDir(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string // substrings
		stderr   []string
		jsonKeys []string // top-level keys when stdout is a JSON object
	}{
		{"latest skips torn", []string{"latest", dir}, 0, []string{filepath.Join(dir, "epoch2.pt") + "\n"}, []string{"skipped", "epoch3.pt", "central directory"}, nil},
		{"latest none", []string{"latest", t.TempDir()}, 1, nil, []string{"no valid checkpoint"}, nil},
		{"latest missing dir", []string{"latest", filepath.Join(dir, "nope")}, 2, nil, []string{"nope"}, nil},
		{"ls", []string{"ls", dir}, 0, []string{"epoch2.pt", "INVALID", "1400"}, nil, nil},
		{"verify good", []string{"verify", "--deep", filepath.Join(dir, "epoch2.pt")}, 0, []string{"ok"}, nil, nil},
		{"verify torn", []string{"verify", filepath.Join(dir, "epoch3.pt")}, 1, []string{"INVALID", "truncated"}, nil, nil},
		{"verify text", []string{"verify", filepath.Join(dir, "train.log")}, 1, []string{"not a checkpoint"}, nil, nil},
		{"verify dir", []string{"verify", dir}, 1, []string{"ok", "INVALID"}, nil, nil},
		{"verify missing", []string{"verify", filepath.Join(dir, "x.pt")}, 2, nil, []string{"x.pt"}, nil},
		{"inspect json", []string{"inspect", "--json", ckptTestdata + "/torch/training.pt"}, 0, []string{`"epoch": 7`, `"model_state_dict.fc.weight"`},
			nil, []string{"format", "valid", "tensors", "scalars", "storage_bytes", "globals", "findings"}},
		{"inspect human", []string{"inspect", ckptTestdata + "/torch/views.pt"}, 0, []string{"TENSORS", "strided"}, nil, nil},
		{"scan malicious", []string{"scan", ckptTestdata + "/malicious/os_system.pkl"}, 1, []string{"DANGEROUS", "posix.system"}, nil, nil},
		{"scan benign", []string{"scan", ckptTestdata + "/malicious/benign.pt"}, 0, []string{"ok"}, nil, nil},
		{"scan dotted global", []string{"scan", ckptTestdata + "/malicious/attack_dotted_global.pkl"}, 1, []string{"DANGEROUS", "torch.serialization.os.system"}, nil, nil},
		{"scan resolver", []string{"scan", ckptTestdata + "/malicious/attack_import_dotted_name.pkl"}, 1, []string{"DANGEROUS", "_import_dotted_name"}, nil, nil},
		{"scan unknown fails", []string{"scan", ckptTestdata + "/malicious/benign_own_class.pt"}, 1, []string{"UNKNOWN GLOBALS (1)", "__main__.Net", "--allow __main__.Net"}, nil, nil},
		{"scan --allow", []string{"scan", ckptTestdata + "/malicious/benign_own_class.pt", "--allow", "__main__.Net"}, 0, []string{"ok"}, nil, nil},
		{"scan --allow bad", []string{"scan", ckptTestdata + "/malicious/benign.pt", "--allow", "Net"}, 2, nil, []string{"--allow", "MODULE.QUALNAME"}, nil},
		{"scan whole nn.Module", []string{"scan", ckptTestdata + "/malicious/benign_module_nn.pt"}, 0, []string{"ok"}, nil, nil},
		{"scan a text log", []string{"scan", filepath.Join(dir, "train.log")}, 4, []string{"NOT UNDERSTOOD", "refuses it at byte 0"}, nil, nil},
		{"prune needs a rule", []string{"prune", dir}, 2, nil, []string{"--keep-last"}, nil},
		{"prune bad mode", []string{"prune", dir, "--keep-best", "1", "--metric", "loss", "--mode", "up"}, 2, nil, []string{"min or max"}, nil},
		{"prune dry run", []string{"prune", dir, "--keep-last", "1"}, 0, []string{"dry run", "delete", "epoch1.pt", "newest valid"}, nil, nil},
		{"no args", []string{"inspect"}, 2, nil, []string{"accepts 1 arg"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCkpt(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if tc.jsonKeys != nil {
				var m map[string]any
				if err := json.Unmarshal([]byte(out), &m); err != nil {
					t.Fatal(err)
				}
				for _, k := range tc.jsonKeys {
					if _, ok := m[k]; !ok {
						t.Errorf("JSON lacks %q", k)
					}
				}
			}
		})
	}
	// The dry run above deleted nothing.
	if _, err := os.Stat(filepath.Join(dir, "epoch1.pt")); err != nil {
		t.Fatal("dry run deleted epoch1.pt")
	}
}

func TestCkptPruneApply(t *testing.T) {
	dir := runDir(t)
	code, out, errOut := runCkpt(t, "prune", dir, "--keep-last", "1", "--apply", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var plan struct {
		Deleted    []string `json:"deleted"`
		FreedBytes int64    `json:"freed_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Deleted) != 1 || filepath.Base(plan.Deleted[0]) != "epoch1.pt" || plan.FreedBytes == 0 {
		t.Fatalf("plan = %+v", plan)
	}
	for _, keep := range []string{"epoch2.pt", "epoch3.pt", "train.log"} {
		if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
			t.Errorf("%s was deleted", keep)
		}
	}
}

func TestCkptProgressBar(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	b := &progressBar{w: &buf, name: "big.pt", total: 4 << 30, now: func() time.Time { return now }}
	b.add(1 << 30) // first call draws
	b.add(1 << 30) // same instant: throttled
	now = now.Add(time.Second)
	b.add(2 << 30) // done: draws
	b.done()
	out := buf.String()
	if strings.Count(out, "\r") != 3 {
		t.Errorf("want 3 redraws (first, last, done), got %q", out)
	}
	for _, s := range []string{" 25% 1.0 GiB/4.0 GiB", "100% 4.0 GiB/4.0 GiB", "big.pt ["} {
		if !strings.Contains(out, s) {
			t.Errorf("bar lacks %q: %q", s, out)
		}
	}
	var nilBar *progressBar
	nilBar.done() // no panic on nil
	// Not a terminal: no bar at all.
	f := &Factory{IO: IOStreams{ErrOut: &buf}, Now: time.Now}
	if newProgressBar(f, "../ckpt/testdata/torch/training.pt") != nil {
		t.Error("bar created for a non-terminal stderr")
	}
}

// seriesDir copies ../ckpt/testdata/series/run (ckpt-{100,200,300}.pt among a
// config, a vocabulary, training arguments, optimizer state alone, a
// tokenizer and notes/.metadata) into a temp dir; the non-checkpoints get the
// newest modification times.
func seriesDir(t *testing.T) string {
	t.Helper()
	src := ckptTestdata + "/series/run"
	dst := filepath.Join(t.TempDir(), "run")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	names := []string{"ckpt-100.pt", "ckpt-200.pt", "ckpt-300.pt", "config.pt", "optimizer.pt",
		"training_args.bin", "vocab.pkl", "tokenizer.json", "notes/.metadata", "notes/README.txt"}
	for i, n := range names {
		testbin.CopyFile(t, filepath.Join(src, n), filepath.Join(dst, n), t0.Add(time.Duration(i)*time.Minute))
	}
	return dst
}

func TestCkptLsMarksNonCheckpoints(t *testing.T) {
	dir := seriesDir(t)
	code, out, errOut := runCkpt(t, "ls", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, name := range []string{"config.pt", "optimizer.pt", "training_args.bin", "vocab.pkl"} {
		line := lineWith(out, name)
		if !strings.Contains(line, "not a checkpoint:") {
			t.Errorf("%s: %q", name, line)
		}
	}
	if !strings.Contains(lineWith(out, "optimizer.pt"), "optimizer state only") {
		t.Errorf("optimizer.pt line: %q", lineWith(out, "optimizer.pt"))
	}
	// The vocabulary's words "step" and "epoch" are not shown as its step.
	// Fields: path, format, size, unit, date, time, step, epoch, ...
	if f := strings.Fields(lineWith(out, "vocab.pkl")); len(f) < 9 || f[6] != "-" || f[7] != "-" {
		t.Errorf("vocab.pkl line: %q", lineWith(out, "vocab.pkl"))
	}
	if !strings.Contains(lineWith(out, "ckpt-300.pt"), " ok") {
		t.Errorf("ckpt-300.pt line: %q", lineWith(out, "ckpt-300.pt"))
	}
}

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

func TestCkptPruneListsLeftAlone(t *testing.T) {
	dir := seriesDir(t)
	code, out, errOut := runCkpt(t, "prune", dir, "--keep-last", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range []string{"LEFT ALONE", "config.pt", "vocab.pkl", "training_args.bin", "optimizer state only",
		filepath.Join(dir, "notes") + " ", ".metadata", "3 other files", "dry run"} {
		if !strings.Contains(out, s) {
			t.Errorf("prune output lacks %q:\n%s", s, out)
		}
	}
	if !strings.HasPrefix(lineWith(out, "ckpt-100.pt"), "delete") || !strings.HasPrefix(lineWith(out, "ckpt-300.pt"), "keep") {
		t.Errorf("plan:\n%s", out)
	}
	for _, name := range []string{"config.pt", "vocab.pkl", "optimizer.pt", "training_args.bin"} {
		if strings.HasPrefix(lineWith(out, name), "delete") {
			t.Errorf("%s planned for deletion:\n%s", name, out)
		}
	}

	code, out, errOut = runCkpt(t, "prune", dir, "--keep-last", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var plan struct {
		Items []struct {
			Path string `json:"path"`
			Keep bool   `json:"keep"`
			Kind string `json:"kind"`
		} `json:"items"`
		LeftAlone []struct {
			Path string `json:"path"`
			Why  string `json:"why"`
		} `json:"left_alone"`
		OtherFiles int `json:"other_files"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Items) != 3 || len(plan.LeftAlone) != 5 || plan.OtherFiles != 3 {
		t.Fatalf("plan: %d items, %d left alone, %d other files:\n%s", len(plan.Items), len(plan.LeftAlone), plan.OtherFiles, out)
	}
	for _, la := range plan.LeftAlone {
		if la.Why == "" {
			t.Errorf("%s left alone without a reason", la.Path)
		}
	}
}

func TestCkptLatestNoneValid(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"ckpt-100.pt", "ckpt-200.pt"} {
		b, err := os.ReadFile(ckptTestdata + "/series/run/" + n)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, n), b[:len(b)/2], 0o644)
	}
	testbin.CopyFile(t, ckptTestdata+"/series/run/config.pt", filepath.Join(dir, "config.pt"), time.Now())
	code, out, errOut := runCkpt(t, "latest", dir)
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, s := range []string{"skipped " + filepath.Join(dir, "ckpt-100.pt"), "skipped " + filepath.Join(dir, "ckpt-200.pt"),
		"truncated", "2 saved, every one failed verification"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errOut)
		}
	}
	if strings.Contains(errOut, "config.pt") {
		t.Errorf("config.pt named as a skipped checkpoint:\n%s", errOut)
	}
	code, out, _ = runCkpt(t, "latest", "--json", dir)
	var res struct {
		Latest         any               `json:"latest"`
		Invalid        []json.RawMessage `json:"invalid"`
		NotCheckpoints []json.RawMessage `json:"not_checkpoints"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	if res.Latest != nil || len(res.Invalid) != 2 || len(res.NotCheckpoints) != 1 {
		t.Errorf("json: %s", out)
	}
}

// zipCmdWork bounds what one ckpt command on a zip attack fixture may
// allocate and inflate: the bombs inflate to 250 MiB and more, of which
// the command reads the pickle (a few KiB) and never holds a record whole.
const zipCmdWork = 32 << 20

// runCkptWork is runCkpt, with what the command allocated and what it
// inflated from zip records.
func runCkptWork(t *testing.T, args ...string) (code int, stdout, stderr string, alloc uint64, inflated int64) {
	t.Helper()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	i0 := ziparc.TotalInflated()
	code, stdout, stderr = runCkpt(t, args...)
	inflated = ziparc.TotalInflated() - i0
	runtime.ReadMemStats(&m1)
	return code, stdout, stderr, m1.TotalAlloc - m0.TotalAlloc, inflated
}

// Every zip-level attack fixture (scripts/gen-zip-fixtures.py) fails
// `ckpt scan` with exit 1 and the finding named on stdout, allocating and
// inflating at most zipCmdWork.
func TestCkptScanZipAttacks(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"local_name.pt", []string{"DANGEROUS", `names "archive/data.pkX"`, "os.system"}},
		{"case_name.pt", []string{"DANGEROUS", "os.system"}},
		{"disk1.pt", []string{"DANGEROUS", "disk 1 of a multi-disk archive", "os.system"}},
		{"eocd_comment.pt", []string{"DANGEROUS", "comment bytes follow it", "os.system"}},
		{"cd_after.pt", []string{"DANGEROUS", "not in the central directory", "os.system"}},
		{"stored_size.pt", []string{"DANGEROUS", "torch's reader reads 1052", "os.system"}},
		{"deflated_big.pt", []string{"DANGEROUS", "over the scanner's", "os.system"}},
		{"local_sizes.pt", []string{"DANGEROUS", "the local header says 5 bytes"}},
		{"bomb_overlap.pt", []string{"DANGEROUS", "overlap", "deflate bomb"}},
		{"bomb_single.pt", []string{"DANGEROUS", "deflate bomb"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			code, out, errOut, alloc, inflated := runCkptWork(t, "scan", ckptTestdata+"/zipattack/"+tc.file)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			if alloc > zipCmdWork || inflated > zipCmdWork {
				t.Errorf("allocated %d KiB and inflated %d KiB, over %d KiB", alloc>>10, inflated>>10, zipCmdWork>>10)
			}
		})
	}
}

// inspect and verify fail the bombs with exit 1 and a reason, allocating
// and inflating at most zipCmdWork; verify --deep (every record's CRC-32)
// inflates at most that and the 250 MiB the one bomb record declares,
// never holding it.
func TestCkptZipBombsInspectVerify(t *testing.T) {
	for _, f := range []string{"bomb_overlap.pt", "bomb_single.pt", "deflated_big.pt"} {
		for _, args := range [][]string{{"inspect"}, {"verify"}, {"verify", "--deep"}} {
			code, out, errOut, alloc, inflated := runCkptWork(t, append(args, ckptTestdata+"/zipattack/"+f)...)
			if code != 1 || !strings.Contains(out+errOut, "INVALID") {
				t.Errorf("%v %s: exit %d, want 1 and the file named invalid\n%s%s", args, f, code, out, errOut)
			}
			limit := int64(zipCmdWork)
			if args[len(args)-1] == "--deep" {
				limit += 250 << 20
			}
			t.Logf("%v %s: %d KiB allocated, %d KiB inflated", args, f, alloc>>10, inflated>>10)
			if alloc > zipCmdWork || inflated > limit {
				t.Errorf("%v %s: allocated %d KiB (at most %d KiB) and inflated %d KiB (at most %d KiB)",
					args, f, alloc>>10, zipCmdWork>>10, inflated>>10, limit>>10)
			}
		}
	}
}

// A Hugging Face cache snapshot (files are symlinks into ../../blobs) is
// scanned and listed through its links.
func TestCkptHFCacheSnapshot(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "models--org--model")
	b, err := os.ReadFile(ckptTestdata + "/malicious/torch_payload_badcrc.pt")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
	os.WriteFile(filepath.Join(repo, "blobs", "5eed"), b, 0o644)
	snap := filepath.Join(repo, "snapshots", "0123abcd")
	os.MkdirAll(snap, 0o755)
	if err := os.Symlink("../../blobs/5eed", filepath.Join(snap, "pytorch_model.bin")); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCkpt(t, "scan", snap)
	if code != 1 || !strings.Contains(out, "pytorch_model.bin") || strings.Contains(out, "no pickles found") {
		t.Errorf("scan of the snapshot: exit %d\n%s", code, out)
	}
	code, out, _ = runCkpt(t, "ls", snap)
	if !strings.Contains(out, "pytorch_model.bin") {
		t.Errorf("ls of the snapshot: exit %d\n%s", code, out)
	}
}

// TestCkptScanStatuses: scan's exit status and words for what it
// understood and what it did not.
func TestCkptScanStatuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	blob := write("weights.bin", []byte("{\x00\x01binary in no format"))
	zp := filepath.Join(dir, "notes.zip")
	zf, _ := os.Create(zp)
	zw := zip.NewWriter(zf)
	w, _ := zw.Create("readme.txt")
	w.Write([]byte("plain text"))
	zw.Close()
	zf.Close()
	// A zip member numpy.load would read as a .npy, with a header the
	// scanner cannot parse.
	bad := "{'descr': '<i8', 'fortran_order': False, 'shape': (1+1,)}"
	zp2 := filepath.Join(dir, "odd.npz")
	zf, _ = os.Create(zp2)
	zw = zip.NewWriter(zf)
	w, _ = zw.Create("a.npy")
	w.Write(append([]byte("\x93NUMPY\x01\x00"+string(rune(len(bad)))+"\x00"), bad...))
	zw.Close()
	zf.Close()
	edges := ckptTestdata + "/edges"
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
	}{
		{"blob alone", []string{"scan", blob}, ExitNotUnderstood, []string{"NOT UNDERSTOOD", "first byte 0x7b"}},
		{"plain zip", []string{"scan", zp}, 0, []string{"ok", "[zip, 0 pickles]"}},
		{"npz header", []string{"scan", zp2}, ExitNotUnderstood, []string{"NOT UNDERSTOOD", "a.npy: .npy header"}},
		{"npy plain", []string{"scan", edges + "/benign_int.npy"}, 0, []string{"ok", "[npy, 0 pickles]"}},
		{"npy payload", []string{"scan", edges + "/attack_object.npy"}, 1, []string{"DANGEROUS", "os.system"}},
		{"xz payload", []string{"scan", edges + "/attack_split.xz"}, 1, []string{"DANGEROUS", "os.system", "[xz, 1 pickle]"}},
		{"zstd payload", []string{"scan", edges + "/attack_pickle.zst"}, 1, []string{"DANGEROUS", "os.system", "[zstd, 1 pickle]"}},
		{"zstd plain", []string{"scan", edges + "/benign_pickle.zst"}, 0, []string{"ok", "[zstd, 1 pickle]"}},
		{"xz bomb", []string{"scan", edges + "/bomb.xz"}, 1, []string{"FAILED", "more than the scanner's 67108864-byte bound"}},
		{"legacy module record", []string{"scan", edges + "/attack_pid_patch.pt"}, 1, []string{"DANGEROUS", "BUILD on what persistent_load returns", "legacy module record of torch.nn.functional.relu"}},
		{"dir", []string{"scan", dir}, ExitNotUnderstood, []string{"skipped  " + blob, "no pickle opcode", "NOT UNDERSTOOD  " + zp2}},
	}
	for _, tc := range tests {
		code, out, errOut := runCkpt(t, tc.args...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", tc.name, code, tc.code, out, errOut)
		}
		for _, s := range tc.stdout {
			if !strings.Contains(out, s) {
				t.Errorf("%s: stdout lacks %q:\n%s", tc.name, s, out)
			}
		}
	}
	code, out, _ := runCkpt(t, "scan", "--json", dir)
	var rs []struct {
		Path, Status, Skipped string
		Safe                  bool
		NotUnderstood         []string `json:"not_understood"`
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil || code != ExitNotUnderstood || len(rs) != 3 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	want := map[string]string{"notes.zip": "ok", "odd.npz": "not-understood", "weights.bin": "skipped"}
	for _, r := range rs {
		if want[filepath.Base(r.Path)] != r.Status || (r.Status == "ok") != r.Safe {
			t.Errorf("%s: status %s safe %v", r.Path, r.Status, r.Safe)
		}
	}
}

// TestCkptEscapesNames: a file name with a newline or an escape sequence
// is printed quoted by every ckpt command, never raw; --json keeps it.
func TestCkptEscapesNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, err := os.ReadFile(ckptTestdata + "/torch/training.pt")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"ckpt-1.pt\nckpt-9.pt", "ckpt-2\x1b]0;owned\x07.pt"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"ls", dir}, {"latest", dir}, {"prune", dir, "--keep-last", "1"}, {"scan", dir}, {"verify", dir},
		{"inspect", filepath.Join(dir, names[1])}} {
		_, out, errOut := runCkpt(t, args...)
		all := out + errOut
		if strings.ContainsAny(all, "\x1b\x07") || strings.Contains(all, "\nckpt-9.pt") {
			t.Errorf("%v prints a raw name:\n%q", args, all)
		}
		if args[0] != "latest" && args[0] != "inspect" && !strings.Contains(all, `ckpt-1.pt\nckpt-9.pt`) {
			t.Errorf("%v does not name the file with the newline:\n%s", args, all)
		}
	}
	_, out, _ := runCkpt(t, "ls", "--json", dir)
	var es []struct{ Path string }
	if err := json.Unmarshal([]byte(out), &es); err != nil || len(es) != 2 {
		t.Fatalf("%v: %s", err, out)
	}
	for _, e := range es {
		if e.Path != filepath.Join(dir, names[0]) && e.Path != filepath.Join(dir, names[1]) {
			t.Errorf("--json path %q is not the file's name", e.Path)
		}
	}
}
