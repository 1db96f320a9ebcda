package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
