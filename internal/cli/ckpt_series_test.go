package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

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
