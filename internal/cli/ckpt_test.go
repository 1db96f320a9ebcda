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
