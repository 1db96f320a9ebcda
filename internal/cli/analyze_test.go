package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/analyze/trace"
	"github.com/vramguard/vramguard/internal/store"
	"github.com/vramguard/vramguard/internal/testbin"
)

// runAnalyze runs `vramguard analyze args...` with an empty state directory.
func runAnalyze(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runIn(t, t.TempDir(), append([]string{"analyze"}, args...)...)
}

// runIn runs vramguard with args and the state directory home.
func runIn(t *testing.T, home string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	f := &Factory{IO: IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb},
		Now: time.Now, Getenv: func(k string) string {
			if k == "VRAMGUARD_HOME" {
				return home
			}
			return ""
		}}
	root := NewCmdRoot(f)
	root.SetArgs(args)
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
	if code != ExitUsage || !strings.Contains(errs, "some-run: no such file; ") {
		t.Errorf("RUN not recorded: exit %d, %q", code, errs)
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

// analyze RUN and runs export on runs that cannot be judged or exported as
// asked: each ends with its exit status and says why in one line.
func TestAnalyzeRecordedErrors(t *testing.T) {
	home := t.TempDir()
	ctx := context.Background()
	st := testbin.OpenStore(t, home)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, name := range []string{"fresh", "empty", "one"} {
		r := &store.Run{ID: fmt.Sprintf("20261130-12000%d-%s", i, name), Name: name, Command: []string{"python"},
			Status: store.StatusFinished, StartedAt: t0.Add(time.Duration(i) * time.Second)}
		if err := st.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		if name == "fresh" {
			continue
		}
		if err := st.StartAttempt(ctx, &store.Attempt{RunID: r.ID, N: 1, StartedAt: r.StartedAt}); err != nil {
			t.Fatal(err)
		}
		if name == "one" {
			for k := 1; k <= 5; k++ {
				s := &store.Sample{Attempt: 1, T: r.StartedAt.Add(time.Duration(k) * time.Second), RSS: uint64(k) << 20, NProcs: 1}
				if err := st.AddSample(ctx, r.ID, s); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	st.Close()
	csv := filepath.Join("..", "analyze", "trace", "testdata", "steady_00.csv")
	cases := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"no samples", []string{"analyze", "empty"}, ExitFailed, "attempt 1 has no memory samples to analyze"},
		{"no attempts", []string{"analyze", "fresh"}, ExitFailed, "has no attempts yet"},
		{"no such attempt", []string{"analyze", "one", "--attempt", "2"}, ExitUsage, "has no attempt 2 (it has 1)"},
		{"negative attempt", []string{"analyze", "one", "--attempt", "-1"}, ExitUsage, "--attempt -1"},
		{"attempt of a file", []string{"analyze", csv, "--attempt", "1"}, ExitUsage, "--attempt is for a recorded RUN"},
		{"no such run", []string{"analyze", "nope"}, ExitUsage, "nope: no such file; no such run"},
		{"export format", []string{"runs", "export", "one", "--format", "xml"}, ExitUsage, `--format "xml"`},
		{"export no such run", []string{"runs", "export", "nope"}, ExitUsage, "no such run"},
		{"export no attempts", []string{"runs", "export", "fresh"}, ExitFailed, "has no attempts yet"},
		{"export no such attempt", []string{"runs", "export", "one", "--attempt", "3"}, ExitUsage, "has no attempt 3"},
		{"export unwritable", []string{"runs", "export", "one", "-o", filepath.Join(home, "no", "dir", "x.csv")}, ExitFailed, "export run"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := runIn(t, home, c.args...)
			if code != c.code || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 || out != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.args, code, out, errs, c.code, c.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(home, "no")); !os.IsNotExist(err) {
		t.Errorf("a failed export left %v", err)
	}

	// a run without samples exports as the header alone, with a note
	out, errs, code := runIn(t, home, "runs", "export", "empty")
	if code != 0 || out != trace.Header+","+strings.Join(trace.Extras, ",")+"\n" || !strings.Contains(errs, "no memory samples") {
		t.Errorf("export empty: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// five samples are too few to judge, and say so, naming run and attempt
	out, errs, code = runIn(t, home, "analyze", "one", "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil || code != 0 {
		t.Fatalf("analyze one --json: exit %d, %v: %s%s", code, err, out, errs)
	}
	if m["verdict"] != "insufficient_data" || m["samples"] != 5.0 || m["run_id"] != "20261130-120002-one" || m["attempt"] != 1.0 {
		t.Errorf("analyze one --json = %v", m)
	}
	// -o writes the file and nothing on stdout
	p := filepath.Join(t.TempDir(), "one.csv")
	out, errs, code = runIn(t, home, "runs", "export", "one", "-o", p)
	body, _ := os.ReadFile(p)
	if code != 0 || out != "" || errs != "" || !strings.HasSuffix(string(body), "\n5,,,,,5242880,,,,,,\n") {
		t.Errorf("export -o: exit %d, stdout %q, stderr %q, file %q", code, out, errs, body)
	}
}
