package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func runAnalyze(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb},
		Now: time.Now, Getenv: func(string) string { return "" }}
	root := NewCmdRoot(f)
	root.SetArgs(append([]string{"analyze"}, args...))
	code := exitCode(f, root.Execute())
	return out.String(), errb.String(), code
}

func TestAnalyzeJSON(t *testing.T) {
	p := filepath.Join("..", "analyze", "trace", "testdata", "linear_leak_01.csv")
	out, errs, code := runAnalyze(t, p, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"verdict", "leak_rate_bytes_per_s", "leak_start_t", "detected_at_t", "oom_eta_s", "confidence", "evidence"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing key %q", k)
		}
	}
	if m["verdict"] != "leak" || m["detected_at_t"] == nil {
		t.Errorf("verdict %v detected_at_t %v, want a leak with a detection time", m["verdict"], m["detected_at_t"])
	}
}

func TestAnalyzeBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"header.csv":    "time,a\n1,2\n",
		"cell.csv":      "t,allocated,reserved,used,total\n0,x,1,2,3\n",
		"nan.csv":       "t,allocated,reserved,used,total\n0,NaN,1,2,3\n",
		"backwards.csv": "t,allocated,reserved,used,total\n5,1,1,2,3\n4,1,1,2,3\n",
	}
	for name, body := range cases {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errs, code := runAnalyze(t, p)
		if code != ExitUsage || !strings.Contains(errs, name) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line naming the file", name, code, errs)
		}
	}
	_, errs, code := runAnalyze(t, "some-run")
	if code != ExitUsage || !strings.Contains(errs, "not a file") {
		t.Errorf("RUN without a store: exit %d, %q", code, errs)
	}
}

// --score runs the detector over a labelled directory and reports per family;
// its exit status says whether the acceptance thresholds hold.
func TestAnalyzeScore(t *testing.T) {
	dir := filepath.Join("..", "analyze", "trace", "testdata")
	out, errs, code := runAnalyze(t, "--score", dir, "--json")
	var m struct {
		All struct {
			Traces    int     `json:"traces"`
			Recall    float64 `json:"recall"`
			Precision float64 `json:"precision"`
		} `json:"all"`
		Results []struct {
			Name string `json:"name"`
		} `json:"results"`
		Pass   bool     `json:"pass"`
		Misses []string `json:"misses"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not one JSON object (exit %d, %s): %v\n%s", code, errs, err, out)
	}
	if m.All.Traces != len(m.Results) || m.All.Traces == 0 {
		t.Errorf("all.traces %d, %d results", m.All.Traces, len(m.Results))
	}
	for _, r := range m.Results {
		if !strings.HasPrefix(r.Name, dir) {
			t.Errorf("result %q does not name its directory", r.Name)
		}
	}
	if m.Pass != (code == 0) || m.Pass != (len(m.Misses) == 0) {
		t.Errorf("pass %v, exit %d, misses %q: inconsistent", m.Pass, code, m.Misses)
	}
	out, _, _ = runAnalyze(t, "--score", dir)
	for _, want := range []string{"family", "linear_leak", "ETA ±25%", "all"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if _, errs, code := runAnalyze(t, "--score", filepath.Join(dir, "nope")); code != ExitUsage || errs == "" {
		t.Errorf("missing directory: exit %d, %q; want 2", code, errs)
	}
	if _, _, code := runAnalyze(t, "--score", dir, "x.csv"); code != ExitUsage {
		t.Errorf("--score with a file: exit %d, want 2", code)
	}
}
