package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// complete runs `vramguard __complete args...`, as a shell's completion
// script does, and returns the candidates (without descriptions) and the
// directive line.
func complete(t *testing.T, home string, args ...string) ([]string, string) {
	t.Helper()
	out, errOut, code := runIn(t, home, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	directive := lines[len(lines)-1]
	var cands []string
	for _, l := range lines[:len(lines)-1] {
		v, _, _ := strings.Cut(l, "\t")
		cands = append(cands, v)
	}
	return cands, directive
}

func TestCompletion(t *testing.T) {
	home := runsHome(t)
	scen := t.TempDir()
	for _, p := range []string{"workstation.json", "notes.txt", "more/x.json"} {
		os.MkdirAll(filepath.Join(scen, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(scen, p), []byte("{}"), 0o644)
	}
	const noFiles, noFilesKeepOrder, noSpace = ":4", ":36", ":6"
	tests := []struct {
		name      string
		args      []string
		want      []string
		directive string
	}{
		{"RUN: names, ids, last", []string{"explain", ""}, []string{
			"flaky", "analysis.ipynb", "bert-large-finetune", "sweep-lr-3e-4",
			"20261129-174500-e1e2e3", "20261129-172010-0f9e8d", "20261129-155501-ab12cd", "20261126-090000-77aa01", "20261120-120000-5c5c5c",
			"last"}, noFilesKeepOrder},
		{"RUN by name prefix", []string{"logs", "-f", "bert"}, []string{"bert-large-finetune"}, noFilesKeepOrder},
		{"RUN by id prefix", []string{"runs", "export", "20261129-1"}, []string{"20261129-174500-e1e2e3", "20261129-172010-0f9e8d", "20261129-155501-ab12cd"}, noFilesKeepOrder},
		{"stop: running runs only", []string{"stop", ""}, []string{"analysis.ipynb", "20261129-172010-0f9e8d"}, noFilesKeepOrder},
		{"one RUN only", []string{"explain", "flaky", ""}, nil, noFiles},
		{"--restart", []string{"run", "--restart", ""}, []string{"never", "on-failure", "always"}, noFiles},
		{"--sort", []string{"top", "--sort", ""}, []string{"gpu", "rss", "pid", "name"}, noFiles},
		{"--format", []string{"runs", "export", "--format", ""}, []string{"csv", "json"}, noFiles},
		{"--stream", []string{"logs", "--stream", "std"}, []string{"stdout", "stderr"}, noFiles},
		{"--gpu-backend", []string{"kernels", "--gpu-backend", ""}, []string{"auto", "nvml", "none", "sim:"}, noFiles},
		{"--gpu-backend s", []string{"serve", "--gpu-backend", "s"}, []string{"sim:"}, noSpace},
		{"--gpu-backend sim:PATH", []string{"run", "--gpu-backend", "sim:" + scen + "/"}, []string{"sim:" + scen + "/more/", "sim:" + scen + "/workstation.json"}, noSpace},
		{"--simulate", []string{"top", "--simulate", ""}, []string{"json"}, ":8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, directive := complete(t, home, tt.args...)
			if !reflect.DeepEqual(got, tt.want) || directive != tt.directive {
				t.Errorf("__complete %q:\n got %q %s\nwant %q %s", tt.args, got, directive, tt.want, tt.directive)
			}
		})
	}
	// Completing never creates a state directory.
	empty := filepath.Join(t.TempDir(), "state")
	if got, _ := complete(t, empty, "explain", ""); len(got) != 0 {
		t.Errorf("no runs, yet %q", got)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("completion created %s", empty)
	}
	// analyze takes a trace file too: with no run to offer, files.
	if _, directive := complete(t, empty, "analyze", "trace"); directive != ":0" {
		t.Errorf("analyze without runs: directive %s, want file completion :0", directive)
	}
}
